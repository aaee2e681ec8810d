package health

import (
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

// TestFleetEnableWithoutStateChangeIsShared: in fleet mode an operator's
// enable of a record already eligible or probe_allowed here changes no
// state but is recorded (a history entry at its time) and published as
// an enable, so that the fleet orders it among operator actions (a
// disable made elsewhere during a Redis outage must not win over it). In
// single-process mode it stays a no-op. Bug: such an enable was dropped
// without a trace, and the other instance's older disable won.
func TestFleetEnableWithoutStateChangeIsShared(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		start bool // StartEligible: the record is eligible, else probe_allowed
		state State
	}{{"eligible", true, Eligible}, {"probe_allowed", false, ProbeAllowed}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, fleet := range []bool{true, false} {
				clk := healthtest.NewClock(t0)
				tr := NewTracker(Config{StartEligible: tc.start}, clk, zerolog.Nop())
				ff := &fakeFleet{}
				if fleet {
					tr.SetFleet(ff, nil, time.Second)
				}
				r := tr.Add("k", "up", nil, false)
				clk.Advance(time.Second)
				tr.Enable(r)
				s := tr.Snapshot(r)
				if s.State != tc.state {
					t.Fatalf("fleet %v: state %v after enable, want %v (unchanged)", fleet, s.State, tc.state)
				}
				pub, _, _ := ff.snapshot()
				if !fleet {
					if len(s.History) != 0 {
						t.Errorf("single process: history %+v, want none", s.History)
					}
					continue
				}
				at := t0.Add(time.Second)
				if len(s.History) != 1 {
					t.Fatalf("history %+v, want the enable", s.History)
				}
				if h := s.History[0]; h.From != tc.state || h.To != tc.state || h.Reason != Operator || h.Stage != StageOperator ||
					h.Detail != "enabled by operator" || !h.At.Equal(at) {
					t.Errorf("history entry %+v", h)
				}
				if len(pub) != 1 {
					t.Fatalf("published %+v, want the enable", pub)
				}
				if p := pub[0]; p.State != ProbeAllowed || p.From != tc.state || p.Stage != StageOperator || p.Reason != Operator || !p.At.Equal(at) {
					t.Errorf("published %+v, want an enable from %v", p, tc.state)
				}
				if rs, ok := tr.Shared("k"); !ok || rs.State != tc.state || len(rs.History) != 1 {
					t.Errorf("Shared %+v %v: want the record as it is, with the enable", rs, ok)
				}
			}
		})
	}
}
