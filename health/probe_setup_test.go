package health

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

// setupDialer is a pipeUpstream whose dial takes delay on clk (it
// advances clk), and which keeps the set-up times the prober reports.
type setupDialer struct {
	up    *pipeUpstream
	clk   *healthtest.Clock
	delay time.Duration

	mu  sync.Mutex
	got []time.Duration
}

func (d *setupDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.clk.Advance(d.delay)
	return d.up.DialContext(ctx, network, addr)
}

func (d *setupDialer) ObserveSetup(x time.Duration) {
	d.mu.Lock()
	d.got = append(d.got, x)
	d.mu.Unlock()
}

func (d *setupDialer) observed() []time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.got)
}

// TestProbeReportsSetup: a passing probe tells its dialer its set-up time
// (dial and proxy handshake), so that lowest-latency has figures before
// any traffic. Bug: probe latencies seeded nothing, and lowest-latency
// picked blindly until tunnels had measured the upstreams. A failed probe
// reports nothing.
func TestProbeReportsSetup(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	fast := &setupDialer{up: &pipeUpstream{}, clk: clk, delay: 2 * time.Millisecond}
	slow := &setupDialer{up: &pipeUpstream{}, clk: clk, delay: 300 * time.Millisecond}
	bad := &setupDialer{up: &pipeUpstream{}, clk: clk, delay: time.Millisecond}
	bad.up.status.Store(502)
	tr.Add("fast", "fast", fast, false)
	tr.Add("slow", "slow", slow, false)
	tr.Add("bad", "bad", bad, false)
	drive(t, tr)
	if got := fast.observed(); !slices.Equal(got, []time.Duration{2 * time.Millisecond}) {
		t.Errorf("fast: set-up times %v, want [2ms]", got)
	}
	if got := slow.observed(); !slices.Equal(got, []time.Duration{300 * time.Millisecond}) {
		t.Errorf("slow: set-up times %v, want [300ms]", got)
	}
	if got := bad.observed(); len(got) != 0 {
		t.Errorf("bad (its probe failed): set-up times %v, want none", got)
	}
}
