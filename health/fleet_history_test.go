package health

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

// TestFleetHistoryKeepsWhatTheStoreLost pins how a shared history from
// the fleet's store meets the record's own (ApplyRemote and SetHistory):
// it replaces it, except for entries that came from the store, are older
// than everything the store now holds, and would fit under its bound,
// which the store lost (a Redis restarted empty). Bug: the store's one
// entry written after such a restart replaced the whole history.
func TestFleetHistoryKeepsWhatTheStoreLost(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	entry := func(i int, inst string) Transition {
		tr := Transition{At: t0.Add(time.Duration(i) * time.Second), From: Eligible, To: Cooling, Reason: Refused,
			Stage: StageDial, Detail: fmt.Sprintf("e%d", i), Instance: inst}
		if inst != "" {
			tr.Detail += " (instance " + inst + ")"
		}
		return tr
	}
	shared := func(from, to int) []Transition {
		var h []Transition
		for i := from; i <= to; i++ {
			h = append(h, entry(i, "b"))
		}
		return h
	}
	for _, tc := range []struct {
		name  string
		local []Transition // the record's history before
		h     []Transition // the store's
		bound int
		want  string
	}{
		{"the store lost the older entries", shared(0, 4), shared(9, 9), 20, "e0 e1 e2 e3 e4 e9"},
		{"the store kept them: replaced", shared(0, 4), shared(0, 5), 20, "e0 e1 e2 e3 e4 e5"},
		{"a full store history is replaced", shared(0, 4), shared(6, 8), 3, "e6 e7 e8"},
		{"kept up to the bound", shared(0, 4), shared(9, 9), 3, "e3 e4 e9"},
		{"no bound: replaced", shared(0, 4), shared(9, 9), 0, "e9"},
		{"entries never shared are the store's to keep", []Transition{entry(0, ""), entry(1, "")}, shared(9, 9), 20, "e9"},
		{"newer entries the store lacks are not kept", append(shared(0, 1), entry(5, "b")), shared(3, 3), 20, "e0 e1 e3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, via := range []string{"ApplyRemote", "SetHistory"} {
				tr := NewTracker(Config{StartEligible: true}, healthtest.NewClock(t0.Add(time.Minute)), zerolog.Nop())
				tr.SetFleet(&fakeFleet{}, nil, time.Second)
				r := tr.Add("k", "up", nil, false)
				r.mu.Lock()
				r.hist.replace(tc.local)
				r.mu.Unlock()
				last := tc.h[len(tc.h)-1]
				if via == "ApplyRemote" {
					tr.ApplyRemote("k", RemoteState{Key: "k", State: Cooling, From: Eligible, Reason: Refused, Stage: StageDial,
						Detail: "e", Until: t0.Add(2 * time.Minute), At: last.At, Instance: "b", History: tc.h, HistoryBound: tc.bound})
				} else {
					tr.SetHistory("k", tc.h, tc.bound)
				}
				var got []string
				for _, e := range tr.Snapshot(r).History {
					got = append(got, strings.TrimSuffix(e.Detail, " (instance b)"))
				}
				if strings.Join(got, " ") != tc.want {
					t.Errorf("%s: history %q, want %q", via, strings.Join(got, " "), tc.want)
				}
			}
		})
	}
}
