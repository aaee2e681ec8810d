package health

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
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

// TestRestoreBoundsSavedDeadline: a saved cooling deadline further away
// than its class's max cooldown (a file written by a clock far ahead, or
// edited) cools for the max from the restore, as do per-target cooldowns.
// Bug: a deadline five years ahead kept the upstream out for five years.
func TestRestoreBoundsSavedDeadline(t *testing.T) {
	cfg := Config{StartEligible: true, Cooldown: CooldownConfig{Jitter: -1, Refused: ClassPolicy{Base: time.Second, Max: 20 * time.Second}}}
	a, clk := newFakeTracker(t, cfg)
	r := a.Add("k", "up", nil, false)
	a.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	saved := a.Export()[0]
	far := clk.Now().Add(5 * 365 * 24 * time.Hour).UTC()
	saved.Until = far
	saved.Targets = []TargetCooldown{{Host: "shop.example", Reason: Refused, Stage: StageTargetConnect, Until: far, Streak: 1}}

	b := NewTracker(cfg, clk, a.log)
	b.Add("k", "up", nil, false)
	if !b.Restore("k", saved) {
		t.Fatal("Restore = false")
	}
	got := b.Snapshot(b.Lookup("k"))
	if limit := clk.Now().Add(20 * time.Second); got.State != Cooling || got.Until.After(limit) {
		t.Fatalf("restored %v until %v, want cooling until at most %v", got.State, got.Until, limit)
	}
	if len(got.Targets) != 1 || got.Targets[0].Until.After(clk.Now().Add(20*time.Second)) {
		t.Errorf("per-target cooldowns %+v, want shop.example until at most the max from now", got.Targets)
	}
	clk.Advance(20 * time.Second)
	if s := b.Snapshot(b.Lookup("k")).State; s != ProbeAllowed {
		t.Errorf("after the max: %v, want probe_allowed", s)
	}
}

// TestRestoreLogsCutTargets: per-target cooldowns cut to their class's max
// at a restore are logged even when the record's own state needs no line
// (an eligible record restored as probe_allowed posts none).
func TestRestoreLogsCutTargets(t *testing.T) {
	cfg := Config{StartEligible: true}
	a, clk := newFakeTracker(t, cfg)
	a.Add("k", "up", nil, false)
	saved := a.Export()[0]
	saved.Targets = []TargetCooldown{{Host: "shop.example", Reason: TargetHTTPError, Stage: StageHTTPStatus,
		Until: clk.Now().Add(5 * 365 * 24 * time.Hour).UTC(), Streak: 1}}
	var logs bytes.Buffer
	b := NewTracker(Config{}, clk, zerolog.New(&logs))
	b.Add("k", "up", nil, false)
	b.Restore("k", saved)
	if !strings.Contains(logs.String(), "were cut to it") || !strings.Contains(logs.String(), `"targets":1`) {
		t.Errorf("no line about the cut per-target cooldown:\n%s", logs.String())
	}
}
