package upstream

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
	"github.com/rs/zerolog"
)

// TestLowestLatencySeededByProbes: two upstreams, one slow and one fast,
// that only probes went through: lowest-latency picks the fast one from
// the first tunnel. Bug: probe latencies did not feed the endpoints'
// smoothed latency, so before any traffic the strategy knew nothing and
// its first picks went to whichever it sampled first. Set-up times come
// from a fake clock each fake advances while it connects to the target
// (before its CONNECT reply), so nothing is timed.
func TestLowestLatencySeededByProbes(t *testing.T) {
	clk := healthtest.NewClock(time.Time{})
	target := upstreamtest.NewTarget(t)
	dialVia := func(delay time.Duration) func(ctx context.Context, network, a string) (net.Conn, error) {
		return func(ctx context.Context, network, a string) (net.Conn, error) {
			clk.Advance(delay)
			var d net.Dialer
			return d.DialContext(ctx, network, target.Addr())
		}
	}
	fast := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Dial: dialVia(time.Millisecond)})
	slow := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Dial: dialVia(150 * time.Millisecond)})
	// One probe at a time, so that one fake's advance never lands inside
	// the other's set-up; a rate whose spacing each probe's own advance
	// covers, so that the prober never waits on the fake clock.
	tr := health.NewTracker(health.Config{SlowStart: -1,
		Probe: health.ProbeConfig{URL: "http://probe.test/ok", MaxConcurrent: 1, Rate: 1e6}}, clk, zerolog.Nop())
	p, err := NewPool(PoolConfig{Strategy: "lowest-latency", WaitForUpstream: time.Millisecond}, DialConfig{AllowPrivate: true}, tr, clk, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	// slow first in the list: the blind first pick took it.
	if _, _, err := p.Update([]Spec{{Name: "slow", URL: slow.URL()}, {Name: "fast", URL: fast.URL()}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }() // owner: the test; ends with ctx
	t.Cleanup(func() {
		cancel()
		<-done
	})
	for _, n := range []string{"slow", "fast"} {
		rec := p.Lookup(n).Record()
		for changed := tr.Changed(); !tr.Eligible(rec); changed = tr.Changed() {
			select {
			case <-changed:
			case <-time.After(10 * time.Second): // a failsafe, not a timed assertion
				t.Fatalf("%s not eligible 10s after the prober started: %+v", n, tr.Snapshot(rec))
			}
		}
	}
	fl, sl := p.Lookup("fast").Latency(), p.Lookup("slow").Latency()
	if fl <= 0 || sl <= 0 || fl >= sl {
		t.Fatalf("after the probes: fast's smoothed latency %v, slow's %v; want both measured, fast below slow", fl, sl)
	}
	if target.Requests() != 2 {
		t.Errorf("%d requests reached the target, want the 2 probes", target.Requests())
	}
	for i := range 10 {
		l, err := p.Dial(t.Context(), Request{Addr: target.Addr()})
		if err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
		name := l.Endpoint.Name
		l.Conn.Close()
		l.Done()
		if name != "fast" {
			t.Fatalf("tunnel %d went through %s, want fast (fast %v, slow %v)", i, name, fl, sl)
		}
	}
}
