package health

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// sharedHistory is the fleet's shared history of what instance inst
// published, as package cluster hands it out: each entry's detail ends
// with the instance's name.
func sharedHistory(pub []RemoteState, inst string) []Transition {
	var h []Transition
	for _, rs := range pub {
		h = append(h, Transition{At: rs.At, From: rs.From, To: rs.State, Reason: rs.Reason, Stage: rs.Stage,
			Detail: rs.Detail + " (instance " + inst + ")", Instance: inst})
	}
	return h
}

// TestFleetEligibleShowsSharedLastFailure: an eligible record shows its
// last failure, the same on every instance for the same shared history
// (bug: the instance that made the transitions showed its disable, one
// that applied every transition the operator's enable, and one that
// applied only the final eligible record none at all: reason and stage
// null). Each case: instance a makes the transitions locally (a real
// probe passes), b applies each of them, c only the last one.
func TestFleetEligibleShowsSharedLastFailure(t *testing.T) {
	for _, tc := range []struct {
		name   string
		do     func(tr *Tracker, r *Record)
		reason Class
		stage  Stage
		detail string
	}{
		{"disable then enable", func(tr *Tracker, r *Record) {
			tr.Disable(r, "disabled via admin API")
			tr.Enable(r)
		}, Operator, StageOperator, "disabled via admin API (instance a)"},
		{"cooling then probe", func(tr *Tracker, r *Record) {
			tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
			time.Sleep(31 * time.Second) // refused base 30s: cooled, then probed and passed
		}, Refused, StageDial, ""},
		{"cooling then enable", func(tr *Tracker, r *Record) {
			tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
			synctest.Wait()
			tr.Enable(r)
		}, Refused, StageDial, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := syncCfg()
				cfg.StartEligible = true
				a := NewTracker(cfg, nil, zerolog.Nop())
				ff := &fakeFleet{grant: true}
				a.SetFleet(ff, ff, time.Second)
				ra := a.Add("k", "up", &pipeUpstream{}, false)
				startRun(t, a)
				tc.do(a, ra)
				synctest.Wait()
				pub, _, _ := ff.snapshot()
				if len(pub) == 0 || pub[len(pub)-1].State != Eligible {
					t.Fatalf("a published %+v, want it to end eligible", pub)
				}
				hist := sharedHistory(pub, "a")
				a.SetHistory("k", hist, 0) // after a's own write, as package cluster does

				var others []*Tracker
				for range 2 {
					tr := NewTracker(cfg, nil, zerolog.Nop())
					tr.SetFleet(&fakeFleet{}, nil, time.Second)
					tr.Add("k", "up", &pipeUpstream{}, false)
					others = append(others, tr)
				}
				for i, rs := range pub {
					rs.Instance, rs.History = "a", hist[:i+1]
					others[0].ApplyRemote("k", rs)
					if i == len(pub)-1 {
						others[1].ApplyRemote("k", rs)
					}
				}
				for i, tr := range append([]*Tracker{a}, others...) {
					s := tr.Snapshot(tr.Lookup("k"))
					if s.State != Eligible || s.Reason != tc.reason || s.Stage != tc.stage {
						t.Errorf("instance %c: %v %v %v, want eligible %v %v", 'a'+i, s.State, s.Reason, s.Stage, tc.reason, tc.stage)
					}
					if tc.detail != "" && s.Detail != tc.detail {
						t.Errorf("instance %c: detail %q, want %q", 'a'+i, s.Detail, tc.detail)
					}
					if want := a.Snapshot(ra).Detail; s.Detail != want {
						t.Errorf("instance %c: detail %q, a shows %q", 'a'+i, s.Detail, want)
					}
				}
			})
		})
	}
}
