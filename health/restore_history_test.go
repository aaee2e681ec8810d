package health

import (
	"slices"
	"testing"
	"time"
)

// TestRestoreRecordsNoTransition: a record given back its saved state (a
// state file at start-up, an upstream back in the config) keeps the saved
// history as it was and tells the observer of no transition. Bug: each
// restore added "probe_allowed → cooling" (or → disabled) with the last
// failure's stage, probe say, to the history and to
// rotor_transitions_total, for a state the upstream never had and a probe
// that never ran.
func TestRestoreRecordsNoTransition(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(tr *Tracker, r *Record)
		want State
	}{
		{"cooling", func(tr *Tracker, r *Record) { tr.Fail(r, &Failure{Class: Refused, Stage: StageDial}) }, Cooling},
		{"disabled", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit IPs") }, Disabled},
	} {
		t.Run(tc.name+" state file", func(t *testing.T) {
			a, clk := newFakeTracker(t, Config{StartEligible: true})
			tc.fail(a, a.Add("k", "up", nil, false))
			saved := a.Export()[0]

			b := NewTracker(Config{}, clk, a.log)
			obs := &recordObserver{}
			b.SetObserver(obs)
			b.Add("k", "up", nil, false)
			if !b.Restore("k", saved) {
				t.Fatal("Restore = false")
			}
			got := b.Snapshot(b.Lookup("k"))
			if got.State != tc.want {
				t.Fatalf("state %v, want %v", got.State, tc.want)
			}
			if !slices.Equal(got.History, saved.History) {
				t.Errorf("history after the restore:\n%+v\nwant the saved one:\n%+v", got.History, saved.History)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.trs) != 0 {
				t.Errorf("observer told of transitions %+v, want none", obs.trs)
			}
		})
		t.Run(tc.name+" back in the config", func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{StartEligible: true})
			tc.fail(tr, tr.Add("k", "up", nil, false))
			before := tr.Snapshot(tr.Lookup("k"))
			tr.Remove("k")
			clk.Advance(2 * time.Second)
			obs := &recordObserver{}
			tr.SetObserver(obs)
			r := tr.Add("k", "up", nil, false)
			got := tr.Snapshot(r)
			if got.State != tc.want {
				t.Fatalf("state %v, want %v", got.State, tc.want)
			}
			if !slices.Equal(got.History, before.History) {
				t.Errorf("history after coming back:\n%+v\nwant the one it left with:\n%+v", got.History, before.History)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.trs) != 0 {
				t.Errorf("observer told of transitions %+v, want none", obs.trs)
			}
		})
	}
}
