package health

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rs/zerolog"
)

// TestProbeTargetStatusDown: the probe target answers 503 to every
// request, through every upstream. Bug: the "probe target seems down"
// guard covered only a target the upstreams could not reach, so each
// probe's "probe status 503" counted as the upstream's upstream_error:
// every upstream's cooldown grew and permanent_after disabled them all.
// Probes through two upstreams meeting the same unexpected status are the
// target's: cooldowns stay at base, the detail says so, one warning.
func TestProbeTargetStatusDown(t *testing.T) {
	var logs bytes.Buffer // drive probes synchronously: one writer at a time
	clk := healthtest.NewClock(time.Time{})
	cfg := Config{Probe: ProbeConfig{URL: testProbeURL},
		Cooldown: CooldownConfig{Jitter: -1, UpstreamError: ClassPolicy{PermanentAfter: 3}}}
	tr := NewTracker(cfg, clk, zerolog.New(&logs))
	var ups []*pipeUpstream
	var recs []*Record
	for _, n := range []string{"a", "b", "c"} {
		up := &pipeUpstream{}
		up.status.Store(503)
		ups = append(ups, up)
		recs = append(recs, tr.Add(n, n, up, false))
	}
	base := tr.Policy().Cooldown(UpstreamError, 1, 0.5)
	for round := range 6 {
		drive(t, tr)
		for i, r := range recs {
			s := tr.Snapshot(r)
			if s.State != Cooling {
				t.Fatalf("round %d: %s is %v (%v/%v %q), want cooling", round, s.Name, s.State, s.Reason, s.Stage, s.Detail)
			}
			if got := s.Until.Sub(clk.Now()); got != base || s.Streak > 1 {
				t.Errorf("round %d: %s cools for %v (streak %d), want the base %v: a probe target answering 503 grew its cooldown",
					round, s.Name, got, s.Streak, base)
			}
			// The first probe of the first round has no other upstream's
			// to weigh against: its own fault as far as anyone can tell.
			if (round > 0 || i > 0) && !strings.HasPrefix(s.Detail, "probe target seems down: ") {
				t.Errorf("round %d: %s detail %q, want the probe target seems down prefix", round, s.Name, s.Detail)
			}
		}
		clk.Advance(base)
	}
	if n := strings.Count(logs.String(), "probe target seems down"); n != 1 {
		t.Errorf("%d warnings that the probe target seems down, want 1:\n%s", n, logs.String())
	}

	// The target is back: the probes pass, and the warning is lifted.
	for _, up := range ups {
		up.status.Store(200)
	}
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

// TestProbeTargetStatusOneUpstream: one upstream answering 503 itself
// while the others' probes pass is that upstream's failure: its cooldown
// grows as before, and no warning blames the probe target.
func TestProbeTargetStatusOneUpstream(t *testing.T) {
	var logs bytes.Buffer
	clk := healthtest.NewClock(time.Time{})
	tr := NewTracker(Config{Probe: ProbeConfig{URL: testProbeURL}, Cooldown: CooldownConfig{Jitter: -1}}, clk, zerolog.New(&logs))
	badUp := &pipeUpstream{}
	badUp.status.Store(503)
	bad := tr.Add("bad", "bad", badUp, false)
	good := tr.Add("good", "good", &pipeUpstream{}, false)
	other := tr.Add("other", "other", &pipeUpstream{}, false)
	drive(t, tr)
	for _, r := range []*Record{good, other} {
		if s := tr.Snapshot(r); s.State != Eligible {
			t.Fatalf("%s: %v", s.Name, s.State)
		}
	}
	for i := range 4 {
		want := tr.Policy().Cooldown(UpstreamError, i+1, 0.5)
		s := tr.Snapshot(bad)
		if got := s.Until.Sub(clk.Now()); s.State != Cooling || got != want || strings.Contains(s.Detail, "probe target") {
			t.Fatalf("cooling %d: %v for %v (%q), want cooling for %v as its own failure", i+1, s.State, got, s.Detail, want)
		}
		clk.Advance(want)
		drive(t, tr)
	}
	if strings.Contains(logs.String(), "probe target seems down") {
		t.Errorf("the probe target was blamed for one upstream's 503:\n%s", logs.String())
	}
}

// TestProbeTargetStatusDiffers: two upstreams failing their probes with
// different statuses say nothing of the target: each is its own failure.
func TestProbeTargetStatusDiffers(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	a, b := &pipeUpstream{}, &pipeUpstream{}
	a.status.Store(503)
	b.status.Store(404)
	ra, rb := tr.Add("a", "a", a, false), tr.Add("b", "b", b, false)
	for i := range 3 {
		drive(t, tr)
		want := tr.Policy().Cooldown(UpstreamError, i+1, 0.5)
		for _, r := range []*Record{ra, rb} {
			s := tr.Snapshot(r)
			if got := s.Until.Sub(clk.Now()); s.State != Cooling || got != want {
				t.Fatalf("cooling %d: %s %v for %v (%q), want cooling for %v", i+1, s.Name, s.State, got, s.Detail, want)
			}
		}
		clk.Advance(want)
	}
}
