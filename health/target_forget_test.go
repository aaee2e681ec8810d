package health

import (
	"testing"
	"time"
)

// TestTargetFailureForgottenOnOwnSuccess: a record's target failure at a
// host:port is answered when that record itself reaches the host:port
// afterwards (the failure was passing). Issue: the failure stayed
// remembered for the target-failure rule's window, so the record's next
// failure there counted on from it: it cooled the record for the
// host:port at once, as if others had reached it since a failure that
// the record itself had long answered, and it counted towards the
// two-host rule. Want: after its own success, the next failure there is a
// first one again, and a cooling it leads to starts at the base.
func TestTargetFailureForgottenOnOwnSuccess(t *testing.T) {
	const h = "shop.example:443"
	tf := func(target string) *Failure {
		return &Failure{Class: TargetUnreachable, Stage: StageTargetConnect, Target: target}
	}
	base := DefaultCooldowns().UpstreamError.Base
	// othersThenFail has good reach target, then bad fail it.
	othersThenFail := func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record, target string) {
		clk.Advance(time.Second)
		tr.SuccessTarget(good, target)
		clk.Advance(time.Second)
		tr.Fail(bad, tf(target))
	}
	// wantFirstFailure checks that bad's last failure at h cooled nothing,
	// and that the one after it (others reaching h in between) cools bad
	// for h at the base cooldown.
	wantFirstFailure := func(t *testing.T, tr *Tracker, clk interface {
		Advance(time.Duration)
		Now() time.Time
	}, bad, good *Record) {
		t.Helper()
		if s := tr.Snapshot(bad); len(s.Targets) != 0 || s.State != Eligible {
			t.Fatalf("the first failure after bad's own success cooled it: %v, targets %+v", s.State, s.Targets)
		}
		othersThenFail(tr, clk, bad, good, h)
		s := tr.Snapshot(bad)
		if len(s.Targets) != 1 || s.Targets[0].Host != h || s.Targets[0].Streak != 1 {
			t.Fatalf("targets %+v, want %s at streak 1", s.Targets, h)
		}
		if got := s.Targets[0].Until.Sub(clk.Now()); got != base {
			t.Errorf("cooled for %v, want the base %v", got, base)
		}
	}

	t.Run("after its cooling for the host:port ended", func(t *testing.T) {
		tr, clk := newFakeTracker(t, Config{StartEligible: true})
		bad, good := tr.Add("bad", "bad", nil, false), tr.Add("good", "good", nil, false)
		othersThenFail(tr, clk, bad, good, h)
		othersThenFail(tr, clk, bad, good, h)
		s := tr.Snapshot(bad)
		if len(s.Targets) != 1 {
			t.Fatalf("set-up: bad not cooled for %s: %+v", h, s.Targets)
		}
		clk.Advance(s.Targets[0].Until.Sub(clk.Now()))
		tr.SuccessTarget(bad, h) // h answers through bad again
		othersThenFail(tr, clk, bad, good, h)
		wantFirstFailure(t, tr, clk, bad, good)
	})
	t.Run("before any cooling", func(t *testing.T) {
		tr, clk := newFakeTracker(t, Config{StartEligible: true})
		bad, good := tr.Add("bad", "bad", nil, false), tr.Add("good", "good", nil, false)
		othersThenFail(tr, clk, bad, good, h)
		clk.Advance(time.Second)
		tr.SuccessTarget(bad, h)
		othersThenFail(tr, clk, bad, good, h)
		wantFirstFailure(t, tr, clk, bad, good)
	})
	t.Run("not towards the two-host rule", func(t *testing.T) {
		tr, clk := newFakeTracker(t, Config{StartEligible: true})
		bad, good := tr.Add("bad", "bad", nil, false), tr.Add("good", "good", nil, false)
		// Others reach a and b after bad's failures there (the rule's
		// evidence), but bad reached a itself in between.
		othersThenFail(tr, clk, bad, good, "a.example:443")
		clk.Advance(time.Second)
		tr.SuccessTarget(bad, "a.example:443")
		tr.SuccessTarget(good, "a.example:443")
		othersThenFail(tr, clk, bad, good, "b.example:443")
		clk.Advance(time.Second)
		tr.SuccessTarget(good, "b.example:443")
		tr.Fail(bad, tf("c.example:443")) // weighs the rule again
		if s := tr.Snapshot(bad); s.State != Eligible {
			t.Fatalf("bad %v %v/%v: a failure it answered itself counted as a host others reach", s.State, s.Reason, s.Stage)
		}
	})
	t.Run("another port is not answered", func(t *testing.T) {
		tr, clk := newFakeTracker(t, Config{StartEligible: true})
		bad, good := tr.Add("bad", "bad", nil, false), tr.Add("good", "good", nil, false)
		othersThenFail(tr, clk, bad, good, h)
		tr.SuccessTarget(bad, "shop.example:80")
		othersThenFail(tr, clk, bad, good, h)
		if s := tr.Snapshot(bad); len(s.Targets) != 1 || s.Targets[0].Host != h {
			t.Fatalf("a success at another port of the host answered the failure at %s: targets %+v", h, s.Targets)
		}
	})
}
