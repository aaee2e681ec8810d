package main

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// bulkResult is one bulk-throughput measurement through one path.
type bulkResult struct {
	Path       string  `json:"path"`
	Round      int     `json:"round"` // 1-based; 0 is the warm-up
	Streams    int     `json:"streams"`
	Connected  int     `json:"connected"`
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`
	MBps       float64 `json:"mb_per_s"` // 10^6 bytes per second, client-received
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	cpuUse
	GatewayCPUPerGiB *float64 `json:"gateway_cpu_s_per_gib"`
	RelayCPUPerGiB   *float64 `json:"relay_cpu_s_per_gib"`
}

// runBulk opens streams tunnels to the source target through d, then, all
// at once, asks each for bytes (the -bulk-bytes budget split across
// streams; 0 = unlimited) and reads until -duration ends or the budget
// is spent. Only bytes read after the start barrier count, so tunnel setup
// is not part of the figure. Direction is download (target to client),
// what scrapers mostly do. CPU of the gateway and the relay is read from
// /proc around the transfer.
func runBulk(ctx context.Context, e *env, path string, d tunnelDialer, streams int) bulkResult {
	res := bulkResult{Path: path, Streams: streams}
	var errs errList
	conns := make([]net.Conn, 0, streams)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range streams {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		c, err := d.DialTunnel(dctx, e.sourceAddr)
		cancel()
		if err != nil {
			errs.add(err)
			continue
		}
		conns = append(conns, c)
	}
	res.Connected = len(conns)
	if len(conns) == 0 {
		res.Errors, res.FirstError = errs.n, errs.first
		return res
	}
	var hdr [8]byte
	if e.bulkBytes > 0 {
		binary.BigEndian.PutUint64(hdr[:], uint64(max(e.bulkBytes/int64(len(conns)), 1)))
	}
	got := make([]int64, len(conns))
	mark := e.mark()
	start := time.Now()
	end := start.Add(e.dur)
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Add(1)
		go func() { // ends at the deadline, at EOF, or on error
			defer wg.Done()
			got[i] = readBulk(c, hdr[:], end, &errs)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.cpuUse = e.since(mark)
	for _, n := range got {
		res.Bytes += n
	}
	res.Seconds = elapsed.Seconds()
	res.MBps = float64(res.Bytes) / 1e6 / res.Seconds
	gib := float64(res.Bytes) / (1 << 30)
	res.GatewayCPUPerGiB = divOpt(res.GatewaySec, gib)
	res.RelayCPUPerGiB = divOpt(res.RelaySec, gib)
	res.Errors, res.FirstError = errs.n, errs.first
	return res
}

// readBulk sends the budget header and reads until end, EOF or an error.
func readBulk(c net.Conn, hdr []byte, end time.Time, errs *errList) int64 {
	c.SetDeadline(end)
	if _, err := c.Write(hdr); err != nil {
		errs.add(err)
		return 0
	}
	buf := make([]byte, bulkChunk)
	var n int64
	for {
		m, err := c.Read(buf)
		n += int64(m)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, os.ErrDeadlineExceeded) {
				errs.add(err)
			}
			return n
		}
	}
}

// errList counts errors from many goroutines and keeps the first text.
type errList struct {
	mu    sync.Mutex // guards the fields below
	n     int
	first string
}

func (l *errList) add(err error) {
	l.mu.Lock()
	if l.n == 0 {
		l.first = err.Error()
	}
	l.n++
	l.mu.Unlock()
}
