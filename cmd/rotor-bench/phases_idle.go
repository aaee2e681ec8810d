package main

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// idleResult is the idle-tunnel memory and fd measurement.
type idleResult struct {
	Path        string  `json:"path"`
	Requested   int     `json:"requested"`
	Established int     `json:"established"` // opened and echoed once
	Alive       int     `json:"alive"`       // still echoing after the hold
	Failures    int     `json:"failures"`
	FirstError  string  `json:"first_error,omitempty"`
	OpenSeconds float64 `json:"open_seconds"`
	HoldSeconds float64 `json:"hold_seconds"`

	GatewayRSSBeforeKiB *int64   `json:"gateway_rss_before_kib"`
	GatewayRSSHeldKiB   *int64   `json:"gateway_rss_held_kib"`
	GatewayKiBPerTunnel *float64 `json:"gateway_kib_per_tunnel"`
	GatewayFDsBefore    *int     `json:"gateway_fds_before"`
	GatewayFDsHeld      *int     `json:"gateway_fds_held"`
	GatewayFDsPerTunnel *float64 `json:"gateway_fds_per_tunnel"`
	GatewayFDsAfter     *int     `json:"gateway_fds_after_close"` // 2 s after all closed
	// fd kinds of the gateway while the tunnels are held and 2 s after close.
	GatewayFDKindsHeld  *fdKinds `json:"gateway_fd_kinds_held"`
	GatewayFDKindsAfter *fdKinds `json:"gateway_fd_kinds_after_close"`
	RelayFDKindsHeld    *fdKinds `json:"relay_fd_kinds_held"`
	GatewayNofile       *int64   `json:"gateway_nofile_limit"`
	// Goroutines come from go_goroutines on the gateway's /metrics, when
	// it exposes it; null otherwise.
	GatewayGoroutinesBefore    *float64 `json:"gateway_goroutines_before"`
	GatewayGoroutinesHeld      *float64 `json:"gateway_goroutines_held"`
	GatewayGoroutinesPerTunnel *float64 `json:"gateway_goroutines_per_tunnel"`

	RelayKiBPerTunnel *float64 `json:"relay_kib_per_tunnel"`
	RelayFDsPerTunnel *float64 `json:"relay_fds_per_tunnel"`
	ToolNofile        uint64   `json:"tool_nofile_limit"`
}

// idleWorkers is how many tunnels are opened concurrently.
const idleWorkers = 64

// runIdle opens n tunnels to the echo target through d (64 at a time, each
// proven by one echo, all within -idle-timeout), holds them idle for -idle-hold, reads RSS and fds of
// the gateway and the relay, re-checks every tunnel with one more echo, then
// closes all and reads the fds again 2 s later. Per-tunnel figures are
// (held - before) / established. The relay carries the same n tunnels, so
// its per-tunnel cost is measured in the same run.
func runIdle(ctx context.Context, e *env, path string, d tunnelDialer, n int) idleResult {
	res := idleResult{Path: path, Requested: n, ToolNofile: e.toolNofile}
	if lim, err := procNofile(e.gwPID); e.gwPID > 0 && err == nil {
		res.GatewayNofile = &lim
	}
	gwBefore, relayBefore := sampleProc(e.gwPID), sampleProc(e.relayPID)
	grBefore := e.goroutines(ctx)

	conns := make([]net.Conn, n)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	var errs errList
	start := time.Now()
	// The whole opening is bounded too: a gateway out of fds leaves
	// connects pending in its backlog, and each would wait out its 10 s.
	octx, ocancel := context.WithTimeout(ctx, e.idleOpen)
	defer ocancel()
	forEachParallel(n, idleWorkers, func(i int, payload, scratch []byte) {
		dctx, cancel := context.WithTimeout(octx, 10*time.Second)
		c, err := d.DialTunnel(dctx, e.echoAddr)
		cancel()
		if err == nil {
			if err = echoOnce(c, payload, scratch, time.Now().Add(10*time.Second)); err != nil {
				c.Close()
			}
		}
		if err != nil {
			errs.add(err)
			return
		}
		conns[i] = c
	})
	res.OpenSeconds = time.Since(start).Seconds()
	res.Failures, res.FirstError = errs.n, errs.first
	for _, c := range conns {
		if c != nil {
			res.Established++
		}
	}

	sleepCtx(ctx, e.idleHold)
	res.HoldSeconds = e.idleHold.Seconds()
	gwHeld, relayHeld := sampleProc(e.gwPID), sampleProc(e.relayPID)
	grHeld := e.goroutines(ctx)
	res.GatewayFDKindsHeld, res.RelayFDKindsHeld = fdKindsOpt(e.gwPID), fdKindsOpt(e.relayPID)

	var alive atomic.Int64
	forEachParallel(n, idleWorkers, func(i int, payload, scratch []byte) {
		if conns[i] != nil && echoOnce(conns[i], payload, scratch, time.Now().Add(5*time.Second)) == nil {
			alive.Add(1)
		}
	})
	res.Alive = int(alive.Load())

	est := float64(res.Established)
	if gwBefore.ok && gwHeld.ok {
		res.GatewayRSSBeforeKiB, res.GatewayRSSHeldKiB = &gwBefore.RSSKiB, &gwHeld.RSSKiB
		res.GatewayKiBPerTunnel = divOpt(fptr(float64(gwHeld.RSSKiB-gwBefore.RSSKiB)), est)
		res.GatewayFDsBefore, res.GatewayFDsHeld = &gwBefore.FDs, &gwHeld.FDs
		res.GatewayFDsPerTunnel = divOpt(fptr(float64(gwHeld.FDs-gwBefore.FDs)), est)
	}
	if relayBefore.ok && relayHeld.ok {
		res.RelayKiBPerTunnel = divOpt(fptr(float64(relayHeld.RSSKiB-relayBefore.RSSKiB)), est)
		res.RelayFDsPerTunnel = divOpt(fptr(float64(relayHeld.FDs-relayBefore.FDs)), est)
	}
	if grBefore != nil && grHeld != nil {
		res.GatewayGoroutinesBefore, res.GatewayGoroutinesHeld = grBefore, grHeld
		res.GatewayGoroutinesPerTunnel = divOpt(fptr(*grHeld-*grBefore), est)
	}

	for i, c := range conns {
		if c != nil {
			c.Close()
			conns[i] = nil
		}
	}
	if gwBefore.ok {
		sleepCtx(ctx, 2*time.Second)
		if s := sampleProc(e.gwPID); s.ok {
			res.GatewayFDsAfter = &s.FDs
		}
		res.GatewayFDKindsAfter = fdKindsOpt(e.gwPID)
	}
	return res
}

func fdKindsOpt(pid int) *fdKinds {
	if pid <= 0 {
		return nil
	}
	k, err := procFDKinds(pid)
	if err != nil {
		return nil
	}
	return &k
}

// forEachParallel calls fn(i) for i in [0, n) from workers goroutines and
// waits for them; each worker gets its own echo payload and scratch buffer.
func forEachParallel(n, workers int, fn func(i int, payload, scratch []byte)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() { // ends when every index is taken
			defer wg.Done()
			payload, scratch := make([]byte, echoSize), make([]byte, echoSize)
			for j := range payload {
				payload[j] = byte('A' + j%26)
			}
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i, payload, scratch)
			}
		}()
	}
	wg.Wait()
}
