package health

import (
	"slices"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestRemovedRecordComesBack: an upstream back in the config within
// goneKeep gets its record back (a list caught mid-write must not turn a
// cooldown, an operator's disable or eligibility into a fresh record);
// past goneKeep it is new, and Run forgets what it kept.
func TestRemovedRecordComesBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		prepare  func(tr *Tracker, r *Record)
		disabled bool          // the re-added spec says disabled
		away     time.Duration // between Remove and Add
		want     State
		wantKept bool // counters and history came back
	}{
		{"eligible serves at once", func(tr *Tracker, r *Record) { tr.Success(r) }, false, 5 * time.Second, Eligible, true},
		{"cooling keeps its deadline", func(tr *Tracker, r *Record) {
			tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
		}, false, 5 * time.Second, Cooling, true},
		{"operator disable stays", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit IPs") }, false, time.Minute, Disabled, true},
		{"config now disables", func(tr *Tracker, r *Record) { tr.Success(r) }, true, time.Second, Disabled, true},
		{"config disable lifted", func(tr *Tracker, r *Record) {
			tr.Add("k", "up", nil, true) // disabled by the config, then removed
		}, false, time.Second, ProbeAllowed, true},
		{"past goneKeep it is new", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit IPs") }, false, goneKeep + time.Second, ProbeAllowed, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
			r := tr.Add("k", "up", &pipeUpstream{}, false)
			drive(t, tr) // first probe passes: eligible
			if got := tr.Snapshot(r).State; got != Eligible {
				t.Fatalf("start: %v", got)
			}
			tc.prepare(tr, r)
			before := tr.Snapshot(r)
			tr.Remove("k")
			clk.Advance(tc.away)
			r2 := tr.Add("k", "up", &pipeUpstream{}, tc.disabled)
			if r2 == r {
				t.Fatal("Add returned the removed record")
			}
			got := tr.Snapshot(r2)
			if got.State != tc.want {
				t.Fatalf("back after %v: %v (%s), want %v", tc.away, got.State, got.Detail, tc.want)
			}
			kept := got.Successes == before.Successes && len(got.History) >= len(before.History) && len(before.History) > 0
			if kept != tc.wantKept {
				t.Errorf("record kept = %v, want %v: before %+v after %+v", kept, tc.wantKept, before, got)
			}
			if tc.want == Cooling && !got.Until.Equal(before.Until) {
				t.Errorf("cooling until %v, want %v", got.Until, before.Until)
			}
			if tc.want == Disabled && !tc.disabled && (got.Reason != Operator || got.Detail != before.Detail) {
				t.Errorf("disabled record came back as %v (%q), want the operator's disable (%q)", got.Reason, got.Detail, before.Detail)
			}
		})
	}
}

// TestRemovedRecordsForgotten: Run's sweep drops what Remove kept once
// goneKeep has passed, so a replaced list does not hold memory.
func TestRemovedRecordsForgotten(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	for _, k := range []string{"a", "b"} {
		tr.Add(k, k, nil, false)
	}
	tr.Remove("a")
	clk.Advance(goneKeep / 2)
	tr.Remove("b")
	gone := func() int {
		tr.mu.RLock()
		defer tr.mu.RUnlock()
		return len(tr.gone)
	}
	sweep := func() {
		due, _, _ := tr.sched.popDue(clk.Now(), nil)
		for _, it := range due {
			if it.kind == kindForget {
				tr.forget(clk.Now())
			}
		}
	}
	if sweep(); gone() != 2 {
		t.Fatalf("%d kept before goneKeep, want 2", gone())
	}
	clk.Advance(goneKeep / 2)
	if sweep(); gone() != 1 {
		t.Fatalf("%d kept after a's goneKeep, want 1 (b)", gone())
	}
	clk.Advance(goneKeep / 2)
	if sweep(); gone() != 0 {
		t.Fatalf("%d kept after b's goneKeep, want 0", gone())
	}
	if tr.Add("a", "a", nil, false); tr.Snapshot(tr.Lookup("a")).State != Eligible || len(tr.Snapshot(tr.Lookup("a")).History) != 0 {
		t.Error("a forgotten record came back with history")
	}
}

// TestRemovedRecordsAcrossRestart: what Remove kept goes through a state
// file (ExportRemoved, then RestoreRemoved in a new tracker) and still
// comes back within goneKeep of the removal, whether the upstream is in
// the config at start or re-added later; past goneKeep it is new. After a
// restart an eligible record is probed first.
func TestRemovedRecordsAcrossRestart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prepare   func(tr *Tracker, r *Record)
		down      time.Duration // between the removal and the restart
		later     time.Duration // re-added this long after the restart; < 0: configured at start
		want      State
		wantKept  bool // RestoreRemoved took it
		wantSaved bool // counters and history came back
	}{
		{"operator disable, configured at start", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit IPs") }, time.Minute, -1, Disabled, true, true},
		{"operator disable, re-added later", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit IPs") }, time.Minute, 5 * time.Minute, Disabled, true, true},
		{"cooling keeps its deadline", func(tr *Tracker, r *Record) {
			tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
		}, 5 * time.Second, -1, Cooling, true, true},
		{"eligible is probed first", func(tr *Tracker, r *Record) { tr.Success(r) }, time.Minute, -1, ProbeAllowed, true, true},
		{"past goneKeep at restart", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit IPs") }, goneKeep, -1, ProbeAllowed, false, false},
		{"past goneKeep when re-added", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit IPs") }, 10 * time.Minute, 5 * time.Minute, ProbeAllowed, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Probe: ProbeConfig{URL: testProbeURL}}
			tr, clk := newFakeTracker(t, cfg)
			r := tr.Add("k", "up", &pipeUpstream{}, false)
			drive(t, tr) // first probe passes: eligible
			tc.prepare(tr, r)
			before := tr.Snapshot(r)
			tr.Remove("k")
			kept := tr.ExportRemoved()
			if len(kept) != 1 || kept[0].Snapshot.Key != "k" || !kept[0].At.Equal(clk.Now()) {
				t.Fatalf("ExportRemoved: %+v, want k removed at %v", kept, clk.Now())
			}

			clk.Advance(tc.down)
			tr2 := NewTracker(cfg, clk, zerolog.Nop())
			var r2 *Record
			if tc.later < 0 {
				r2 = tr2.Add("k", "up", &pipeUpstream{}, false)
			}
			if got := tr2.RestoreRemoved(kept[0]); got != tc.wantKept {
				t.Fatalf("RestoreRemoved = %v, want %v", got, tc.wantKept)
			}
			if tc.later >= 0 {
				if n := len(tr2.ExportRemoved()); n != 1 {
					t.Fatalf("%d removed records kept after the restart, want 1", n)
				}
				clk.Advance(tc.later)
				r2 = tr2.Add("k", "up", &pipeUpstream{}, false)
			}
			got := tr2.Snapshot(r2)
			if got.State != tc.want {
				t.Fatalf("after the restart: %v (%s), want %v", got.State, got.Detail, tc.want)
			}
			saved := got.Successes == before.Successes && len(got.History) >= len(before.History) && len(before.History) > 0
			if saved != tc.wantSaved {
				t.Errorf("record kept = %v, want %v: before %+v after %+v", saved, tc.wantSaved, before, got)
			}
			if tc.want == Cooling && !got.Until.Equal(before.Until) {
				t.Errorf("cooling until %v, want %v", got.Until, before.Until)
			}
			if saved && tc.want != ProbeAllowed && !slices.Equal(got.History, before.History) {
				t.Errorf("history after coming back across a restart:\n%+v\nwant the one it left with:\n%+v", got.History, before.History)
			}
			if n := len(tr2.ExportRemoved()); n != 0 {
				t.Errorf("%d removed records kept once it is back, want 0", n)
			}
		})
	}
}

// TestRestoredRemovedRecordsSwept: records restored in any order are
// swept when their own goneKeep ends, not at the first one's.
func TestRestoredRemovedRecordsSwept(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	at := func(ago time.Duration) time.Time { return clk.Now().Add(-ago) }
	for _, rm := range []Removed{
		{Snapshot: Snapshot{Key: "recent", State: Disabled, Reason: Operator}, At: at(time.Minute)},
		{Snapshot: Snapshot{Key: "old", State: Disabled, Reason: Operator}, At: at(10 * time.Minute)},
		{Snapshot: Snapshot{Key: "expired", State: Disabled, Reason: Operator}, At: at(goneKeep)},
	} {
		tr.RestoreRemoved(rm)
	}
	gone := func() int {
		tr.mu.RLock()
		defer tr.mu.RUnlock()
		return len(tr.gone)
	}
	sweep := func() {
		due, _, _ := tr.sched.popDue(clk.Now(), nil)
		for _, it := range due {
			if it.kind == kindForget {
				tr.forget(clk.Now())
			}
		}
	}
	if gone() != 2 {
		t.Fatalf("%d kept, want 2 (the expired one dropped)", gone())
	}
	clk.Advance(6 * time.Minute)
	if sweep(); gone() != 1 {
		t.Fatalf("%d kept after old's goneKeep, want 1", gone())
	}
	clk.Advance(9 * time.Minute)
	if sweep(); gone() != 0 {
		t.Fatalf("%d kept after recent's goneKeep, want 0", gone())
	}
}
