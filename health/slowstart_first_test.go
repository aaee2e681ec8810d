package health

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

// TestSlowStartOnlyAfterFailure: the ramp protects an upstream that was
// failing from the queue waiting for it; an upstream that did not fail
// serves at full rate when it is admitted. Bug: every admission ramped, so
// with the built-in defaults (one direct upstream, no probe URL) every
// client of a freshly started rotor queued behind 4, 8, 16 tunnels/s, and
// so did every record after a restart.
func TestSlowStartOnlyAfterFailure(t *testing.T) {
	refused := &Failure{Class: Refused, Stage: StageDial}
	for _, tc := range []struct {
		name  string
		probe bool // a probe URL is configured
		// setup returns the tracker and record to admit; it may make
		// the tracker of a restart on clk. The test then runs what is
		// due until r is eligible.
		setup    func(t *testing.T, clk *healthtest.Clock, cfg Config) (*Tracker, *Record)
		wantRamp bool
	}{
		{"new, no probe configured", false, fresh(nil), false},
		{"new, first probe passes", true, fresh(nil), false},
		{"enabled in the config", true, func(t *testing.T, clk *healthtest.Clock, cfg Config) (*Tracker, *Record) {
			tr := NewTracker(cfg, clk, zerolog.Nop())
			tr.Add("k", "up", &pipeUpstream{}, true)
			return tr, tr.Add("k", "up", &pipeUpstream{}, false)
		}, false},
		{"cooldown ended, no probe configured", false, fresh(func(t *testing.T, tr *Tracker, r *Record) { tr.Fail(r, refused) }), true},
		{"probe passed after cooling", true, fresh(func(t *testing.T, tr *Tracker, r *Record) { tr.Fail(r, refused) }), true},
		{"operator enable of a serving upstream", true, fresh(func(t *testing.T, tr *Tracker, r *Record) {
			tr.Disable(r, "maintenance")
			tr.Enable(r)
		}), false},
		{"operator enable of a cooling upstream", true, fresh(func(t *testing.T, tr *Tracker, r *Record) {
			tr.Fail(r, refused)
			tr.Disable(r, "maintenance")
			tr.Enable(r)
		}), true},
		{"operator enable after permanent_after", true, func(t *testing.T, clk *healthtest.Clock, cfg Config) (*Tracker, *Record) {
			cfg.Cooldown.Refused.PermanentAfter = 1
			tr, r := fresh(func(*testing.T, *Tracker, *Record) {})(t, clk, cfg)
			tr.Fail(r, refused)
			if got := tr.Snapshot(r).State; got != Disabled {
				t.Fatalf("after permanent_after: %v", got)
			}
			tr.Enable(r)
			return tr, r
		}, true},
		{"credentials changed after auth_rejected", true, fresh(func(t *testing.T, tr *Tracker, r *Record) {
			tr.Fail(r, &Failure{Class: AuthRejected, Stage: StageProxyAuth})
			tr.CredentialsChanged(r)
		}), true},
		{"recovered earlier, serving again", false, fresh(func(t *testing.T, tr *Tracker, r *Record) {
			tr.Fail(r, refused)
			tr.clock.(*healthtest.Clock).Advance(time.Hour)
			drive(t, tr)
			tr.clock.(*healthtest.Clock).Advance(time.Minute) // its ramp is over
			tr.Disable(r, "maintenance")
			tr.Enable(r)
		}), false},
		{"restored eligible after a restart", true, restarted(func(t *testing.T, tr *Tracker, r *Record) {
			tr.Fail(r, refused) // it failed once and recovered before the restart
			tr.clock.(*healthtest.Clock).Advance(time.Hour)
			drive(t, tr)
		}, 0, 1), false},
		{"restored eligible after two restarts", true, restarted(func(t *testing.T, tr *Tracker, r *Record) {
			tr.Fail(r, refused)
			tr.clock.(*healthtest.Clock).Advance(time.Hour)
			drive(t, tr)
		}, 0, 2), false},
		{"restored cooling after a restart", true, restarted(func(t *testing.T, tr *Tracker, r *Record) { tr.Fail(r, refused) }, 0, 1), true},
		{"restored cooling whose deadline passed while down", true, restarted(func(t *testing.T, tr *Tracker, r *Record) { tr.Fail(r, refused) }, time.Hour, 1), true},
		{"back in the config across a restart, eligible", true, func(t *testing.T, clk *healthtest.Clock, cfg Config) (*Tracker, *Record) {
			tr, r := fresh(func(*testing.T, *Tracker, *Record) {})(t, clk, cfg)
			tr.Remove(r.Key())
			kept := tr.ExportRemoved()
			tr2 := NewTracker(cfg, clk, zerolog.Nop())
			r2 := tr2.Add("k", "up", &pipeUpstream{}, false)
			if !tr2.RestoreRemoved(kept[0]) {
				t.Fatal("RestoreRemoved: not kept")
			}
			return tr2, r2
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{SlowStart: 10 * time.Second, SlowStartRate: 4, Cooldown: CooldownConfig{Jitter: -1}}
			if tc.probe {
				cfg.Probe.URL = testProbeURL
			}
			clk := healthtest.NewClock(time.Time{})
			tr, r := tc.setup(t, clk, cfg)
			clk.Advance(time.Hour) // any cooldown is over
			drive(t, tr)
			snap := tr.Snapshot(r)
			if snap.State != Eligible {
				t.Fatalf("state %v (%s), want eligible", snap.State, snap.Detail)
			}
			got := 0
			for range 100 {
				if tr.Admit(r) {
					got++
				}
			}
			want := 100
			if tc.wantRamp {
				want = 4
			}
			if snap.SlowStart != tc.wantRamp || got != want {
				t.Errorf("slow_start %v, %d of 100 tunnels admitted in its first second; want slow_start %v, %d",
					snap.SlowStart, got, tc.wantRamp, want)
			}
		})
	}
}

// fresh returns a setup that adds record k; with then, it lets its first
// admission happen and then runs then.
func fresh(then func(t *testing.T, tr *Tracker, r *Record)) func(*testing.T, *healthtest.Clock, Config) (*Tracker, *Record) {
	return func(t *testing.T, clk *healthtest.Clock, cfg Config) (*Tracker, *Record) {
		tr := NewTracker(cfg, clk, zerolog.Nop())
		r := tr.Add("k", "up", &pipeUpstream{}, false)
		if then != nil {
			drive(t, tr)
			if got := tr.Snapshot(r).State; got != Eligible {
				t.Fatalf("first admission: %v", got)
			}
			then(t, tr, r)
		}
		return tr, r
	}
}

// restarted returns a setup that prepares record k as fresh(before) does,
// then restarts restarts times (down long between the first stop and
// start), each new tracker restoring the previous one's Export before any
// probe ran.
func restarted(before func(t *testing.T, tr *Tracker, r *Record), down time.Duration, restarts int) func(*testing.T, *healthtest.Clock, Config) (*Tracker, *Record) {
	return func(t *testing.T, clk *healthtest.Clock, cfg Config) (*Tracker, *Record) {
		tr, r := fresh(before)(t, clk, cfg)
		for i := range restarts {
			snaps := tr.Export()
			if i == 0 {
				clk.Advance(down)
			}
			tr = NewTracker(cfg, clk, zerolog.Nop())
			r = tr.Add("k", "up", &pipeUpstream{}, false)
			if !tr.Restore("k", snaps[0]) {
				t.Fatal("Restore: no record")
			}
		}
		return tr, r
	}
}

// TestSlowStartRemoteEligible: a probe passed on another instance
// re-admits the record here with a ramp when it had failed (a cooling
// shared by the fleet), and without one when it had not (a new record the
// other instance probed first).
func TestSlowStartRemoteEligible(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cooled   bool
		wantRamp bool
	}{
		{"new record", false, false},
		{"after a remote cooling", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{SlowStart: 10 * time.Second, SlowStartRate: 4, Probe: ProbeConfig{URL: testProbeURL}})
			r := tr.Add("k", "up", &pipeUpstream{}, false)
			if tc.cooled {
				tr.ApplyRemote("k", RemoteState{Key: "k", State: Cooling, From: ProbeAllowed, Reason: Timeout, Stage: StageDial,
					Until: wall(clk.Now()).Add(time.Minute), Streak: 1, At: wall(clk.Now()), Instance: "b"})
				clk.Advance(2 * time.Minute)
			}
			tr.ApplyRemote("k", RemoteState{Key: "k", State: Eligible, From: ProbeAllowed, Stage: StageProbe,
				Detail: "probe passed", At: wall(clk.Now()), Instance: "b"})
			snap := tr.Snapshot(r)
			if snap.State != Eligible || snap.SlowStart != tc.wantRamp {
				t.Errorf("after the remote eligible: %v, slow_start %v; want eligible, slow_start %v", snap.State, snap.SlowStart, tc.wantRamp)
			}
		})
	}
}
