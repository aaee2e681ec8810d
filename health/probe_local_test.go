package health

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestProbeOutOfLocalResources: a probe that cannot run because this
// machine is out of file descriptors (EMFILE at the dial) says nothing of
// the upstream: it stays probe_allowed, no failure is counted, and it is
// probed again a second later, not at once (bug: it cooled with
// upstream_error at probe, a cooldown that grew with each such probe and
// kept it out after the pressure was gone).
func TestProbeOutOfLocalResources(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	var short atomic.Bool
	short.Store(true)
	var dials atomic.Int64
	up := &pipeUpstream{}
	r := tr.Add("k", "up", funcDialer(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		if short.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("socket: %w", syscall.EMFILE)}
		}
		return up.DialContext(ctx, network, addr)
	}), false)
	drive(t, tr)
	snap := tr.Snapshot(r)
	if snap.State != ProbeAllowed || len(snap.Counts) != 0 {
		t.Fatalf("after a probe with no fd left: %v, counts %+v; want probe_allowed, no failure", snap.State, snap.Counts)
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d probe dials at once, want 1 (the next one a second later)", n)
	}
	clk.Advance(localProbeRetry)
	short.Store(false)
	drive(t, tr)
	if got := tr.Snapshot(r).State; got != Eligible {
		t.Fatalf("after the retry with fds back: %v, want eligible", got)
	}
	if n := dials.Load(); n != 2 {
		t.Errorf("%d probe dials, want 2", n)
	}
}
