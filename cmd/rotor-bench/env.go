package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// env is what every phase needs: the paths, the targets, the processes to
// read from /proc, and the phase bounds.
type env struct {
	dur        time.Duration
	bulkBytes  int64
	idleHold   time.Duration
	idleOpen   time.Duration // bound on opening all idle tunnels
	toolNofile uint64
	warmup     bool // an untimed warm-up run: skip the settle waits

	gwPID, relayPID int    // 0 when not readable
	adminAddr       string // gateway admin, for go_goroutines; may be empty
	relayAddr       string

	baseline tunnelDialer // the client straight to the relay
	fronts   []front      // gateway fronts under test, SOCKS5 first

	sourceAddr, echoAddr *net.TCPAddr
	httpURL              string // the HTTP target, ending in "/"
	gwHTTP               string // gateway HTTP front for absolute-URI forwarding; may be empty
}

// front is one gateway front under test.
type front struct {
	Name string // "socks5" or "connect"
	D    tunnelDialer
}

// cpuUse is the CPU that the gateway and the relay spent during one
// measurement; null when the process is not readable.
type cpuUse struct {
	GatewaySec *float64 `json:"gateway_cpu_s"`
	RelaySec   *float64 `json:"relay_cpu_s"`
}

// cpuMark is a pair of /proc readings taken at the start of a measurement.
type cpuMark struct{ gw, relay procSample }

func (e *env) mark() cpuMark {
	return cpuMark{gw: sampleProc(e.gwPID), relay: sampleProc(e.relayPID)}
}

func (e *env) since(m cpuMark) cpuUse {
	var u cpuUse
	if now := sampleProc(e.gwPID); m.gw.ok && now.ok {
		u.GatewaySec = fptr((now.CPU - m.gw.CPU).Seconds())
	}
	if now := sampleProc(e.relayPID); m.relay.ok && now.ok {
		u.RelaySec = fptr((now.CPU - m.relay.CPU).Seconds())
	}
	return u
}

// goroutines reads go_goroutines from the gateway's Prometheus /metrics;
// nil when there is no admin address or the metric is not exposed.
func (e *env) goroutines(ctx context.Context) *float64 {
	if e.adminAddr == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.adminAddr+"/metrics", nil)
	if err != nil {
		return nil
	}
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return &f
			}
		}
	}
	return nil
}

// probeTunnel opens one tunnel to the echo target through d and echoes.
func (e *env) probeTunnel(ctx context.Context, d tunnelDialer) error {
	c, err := d.DialTunnel(ctx, e.echoAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, echoSize)
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(5 * time.Second)
	}
	return echoOnce(c, make([]byte, echoSize), buf, dl)
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func fptr(v float64) *float64 { return &v }

// divOpt returns a/b, or nil when a is nil or b is not positive.
func divOpt(a *float64, b float64) *float64 {
	if a == nil || b <= 0 {
		return nil
	}
	return fptr(*a / b)
}

func mulOpt(a *float64, k float64) *float64 {
	if a == nil {
		return nil
	}
	return fptr(*a * k)
}
