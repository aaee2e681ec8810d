package health

import (
	"strings"
	"testing"
	"time"
)

// checkChain fails t when an entry of h does not start from the state the
// entry before it ended in.
func checkChain(t *testing.T, h []Transition) {
	t.Helper()
	for i := 1; i < len(h); i++ {
		if h[i].Target != "" {
			continue // a per-target cooldown: From == To, the record's state unchanged
		}
		if h[i].From != h[i-1].To {
			t.Errorf("history entry %d goes %v → %v, but entry %d ended in %v: a gap in the chain\n%+v",
				i, h[i].From, h[i].To, i-1, h[i-1].To, h)
		}
	}
}

// TestRestartRecheckTransition: an eligible record restored after a
// restart is probed before it serves again. Bug: no eligible →
// probe_allowed entry was written, so the history went "… → eligible",
// then "probe_allowed → eligible": a gap in the chain of transitions.
func TestRestartRecheckTransition(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restore func(t *testing.T, a, b *Tracker)
	}{
		{"state file", func(t *testing.T, a, b *Tracker) {
			b.Add("k", "up", &pipeUpstream{}, false)
			if !b.Restore("k", a.Export()[0]) {
				t.Fatal("Restore = false")
			}
		}},
		{"removed before the restart", func(t *testing.T, a, b *Tracker) {
			a.Remove("k")
			rm := a.ExportRemoved()
			if len(rm) != 1 {
				t.Fatalf("%d removed records, want 1", len(rm))
			}
			if !b.RestoreRemoved(rm[0]) {
				t.Fatal("RestoreRemoved = false")
			}
			b.Add("k", "up", &pipeUpstream{}, false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Probe: ProbeConfig{URL: testProbeURL}}
			a, clk := newFakeTracker(t, cfg)
			r := a.Add("k", "up", &pipeUpstream{}, false)
			drive(t, a)
			if s := a.Snapshot(r).State; s != Eligible {
				t.Fatalf("before the restart: %v, want eligible", s)
			}
			clk.Advance(time.Minute)

			b := NewTracker(cfg, clk, a.log)
			obs := &recordObserver{}
			b.SetObserver(obs)
			tc.restore(t, a, b)
			rb := b.Lookup("k")
			s := b.Snapshot(rb)
			if s.State != ProbeAllowed {
				t.Fatalf("restored as %v, want probe_allowed", s.State)
			}
			h := s.History
			if len(h) == 0 || h[len(h)-1].From != Eligible || h[len(h)-1].To != ProbeAllowed ||
				!strings.Contains(h[len(h)-1].Detail, "restart re-check") {
				t.Fatalf("history after the restore ends with %+v, want eligible → probe_allowed for a restart re-check", h)
			}
			checkChain(t, h)
			obs.mu.Lock()
			if len(obs.trs) != 0 {
				t.Errorf("observer told of transitions %+v at the restore, want none", obs.trs)
			}
			obs.mu.Unlock()

			drive(t, b)
			s = b.Snapshot(rb)
			if s.State != Eligible {
				t.Fatalf("after the probe: %v, want eligible", s.State)
			}
			checkChain(t, s.History)
		})
	}
}
