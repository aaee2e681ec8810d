package health

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rs/zerolog"
)

// probeTargetDialer fails every dial at the target, as a healthy SOCKS5
// upstream does when the probe URL's target is down (REP 5), while down
// is set; otherwise it serves the probe like pipeUpstream.
type probeTargetDialer struct {
	down *atomic.Bool
	up   pipeUpstream
}

func (d *probeTargetDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.down.Load() {
		return nil, &Failure{Class: TargetUnreachable, Stage: StageTargetConnect, Target: addr,
			Err: errors.New("socks5 reply 5: connection refused")}
	}
	return d.up.DialContext(ctx, network, addr)
}

// TestProbeTargetDown: with the probe target itself down, every probe
// fails at the target, through every upstream. Issue: each failed probe
// counted as upstream_error / probe and grew the upstream's cooldown
// towards max (and permanent_after disabled it), although nothing said
// the upstreams were at fault. Once probes through two upstreams in a row
// fail at the target with nothing reaching it in between, the probe
// target is taken for down: the probes are retried at the base cooldown,
// nothing counts towards permanent_after, and a warning says so once.
func TestProbeTargetDown(t *testing.T) {
	var logs bytes.Buffer // drive probes synchronously: one writer at a time
	clk := healthtest.NewClock(time.Time{})
	cfg := Config{Probe: ProbeConfig{URL: testProbeURL},
		Cooldown: CooldownConfig{Jitter: -1, UpstreamError: ClassPolicy{PermanentAfter: 3}}}
	tr := NewTracker(cfg, clk, zerolog.New(&logs))
	var down atomic.Bool
	down.Store(true)
	var recs []*Record
	for _, n := range []string{"a", "b", "c"} {
		recs = append(recs, tr.Add(n, n, &probeTargetDialer{down: &down}, false))
	}
	base := tr.Policy().Cooldown(UpstreamError, 1, 0.5)
	for round := range 6 {
		drive(t, tr)
		for _, r := range recs {
			s := tr.Snapshot(r)
			if s.State != Cooling {
				t.Fatalf("round %d: %s is %v (%v/%v %q), want cooling", round, s.Name, s.State, s.Reason, s.Stage, s.Detail)
			}
			if got := s.Until.Sub(clk.Now()); got != base || s.Streak > 1 {
				t.Errorf("round %d: %s cools for %v (streak %d), want the base %v: a dead probe target grew its cooldown", round, s.Name, got, s.Streak, base)
			}
		}
		clk.Advance(base)
	}
	if n := strings.Count(logs.String(), "probe target seems down"); n != 1 {
		t.Errorf("%d warnings that the probe target seems down, want 1:\n%s", n, logs.String())
	}
	s := tr.Snapshot(recs[0])
	if s.Failures[UpstreamError] != 6 || s.ProbesFailed != 6 {
		t.Errorf("failures %v, probes failed %d: each failed probe still counts", s.Failures, s.ProbesFailed)
	}

	// The target is back: the probes pass, and the warning is lifted.
	down.Store(false)
	drive(t, tr)
	for _, r := range recs {
		if s := tr.Snapshot(r); s.State != Eligible {
			t.Fatalf("%s: %v after the probe target came back", s.Name, s.State)
		}
	}
	if !strings.Contains(logs.String(), "probe target reachable again") {
		t.Errorf("no line saying the probe target is reachable again:\n%s", logs.String())
	}
}

// TestProbeTargetDownOneUpstream: one upstream whose probes fail at the
// target while nothing else is probed is that upstream's problem as far
// as anyone can tell (a proxy that reaches no target at all): its
// cooldown grows as before.
func TestProbeTargetDownOneUpstream(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	var down atomic.Bool
	down.Store(true)
	bad := tr.Add("bad", "bad", &probeTargetDialer{down: &down}, false)
	good := tr.Add("good", "good", &probeTargetDialer{down: new(atomic.Bool)}, false)
	drive(t, tr)
	if s := tr.Snapshot(good); s.State != Eligible {
		t.Fatalf("good: %v", s.State)
	}
	for i := range 4 {
		want := tr.Policy().Cooldown(UpstreamError, i+1, 0.5)
		s := tr.Snapshot(bad)
		if got := s.Until.Sub(clk.Now()); s.State != Cooling || got != want {
			t.Fatalf("cooling %d: %v for %v, want cooling for %v", i+1, s.State, got, want)
		}
		clk.Advance(want)
		drive(t, tr)
	}
}

// TestProbeTargetReachedByTraffic: probes through two upstreams failing at
// the target do not take it for down when client traffic reached its
// host:port in between: the target answers, those upstreams do not.
func TestProbeTargetReachedByTraffic(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}, StartEligible: true})
	var down atomic.Bool
	down.Store(true)
	a := tr.Add("a", "a", &probeTargetDialer{down: &down}, false)
	b := tr.Add("b", "b", &probeTargetDialer{down: &down}, false)
	c := tr.Add("c", "c", &probeTargetDialer{down: new(atomic.Bool)}, false)
	tr.Fail(a, &Failure{Class: Refused, Stage: StageDial})
	tr.Fail(b, &Failure{Class: Refused, Stage: StageDial})
	for range 3 {
		clk.Advance(tr.Snapshot(a).Until.Sub(clk.Now())) // a and b come due together
		tr.SuccessTarget(c, "probe.test:80")
		drive(t, tr)
	}
	for _, r := range []*Record{a, b} {
		s := tr.Snapshot(r)
		if want := tr.Policy().Cooldown(UpstreamError, 4, 0.5); s.State != Cooling || s.Until.Sub(clk.Now()) != want {
			t.Errorf("%s: %v for %v, want cooling for %v (the fourth cooling)", s.Name, s.State, s.Until.Sub(clk.Now()), want)
		}
	}
}
