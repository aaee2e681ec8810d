package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// step is one write in TestClusterOperatorDisableHolds: by member, at ms
// after the base time.
type step struct {
	by    string // "a" or "b"
	at    int
	state health.State
	stage health.Stage
}

func TestClusterOperatorDisableHolds(t *testing.T) {
	var (
		disable = func(by string, at int) step { return step{by, at, health.Disabled, health.StageOperator} }
		enable  = func(by string, at int) step { return step{by, at, health.ProbeAllowed, health.StageOperator} }
		passed  = func(by string, at int) step { return step{by, at, health.Eligible, health.StageProbe} }
		cooled  = func(by string, at int) step { return step{by, at, health.Cooling, health.StageDial} }
		// permanent_after: disabled by the machine, not by an operator.
		permanent = func(by string, at int) step { return step{by, at, health.Disabled, health.StageDial} }
		// A record back in the config keeps its last stage, operator
		// included, when it comes back eligible: no operator action.
		revived = func(by string, at int) step { return step{by, at, health.Eligible, health.StageOperator} }
	)
	for _, tc := range []struct {
		name  string
		steps []step
		want  health.State
	}{
		{"a newer probe pass does not end a disable", []step{disable("a", 0), passed("b", 10)}, health.Disabled},
		{"a newer failure does not end a disable", []step{disable("a", 0), cooled("b", 10)}, health.Disabled},
		{"a disable queued in an outage beats a newer failure", []step{cooled("b", 10), disable("a", 0)}, health.Disabled},
		{"a disable queued in an outage beats a newer probe pass", []step{passed("b", 10), disable("a", 0)}, health.Disabled},
		{"an enable ends it", []step{disable("a", 0), passed("b", 10), enable("b", 20)}, health.ProbeAllowed},
		{"then a probe pass counts", []step{disable("a", 0), enable("b", 20), passed("a", 30)}, health.Eligible},
		{"an enable on the disabling instance", []step{disable("a", 0), enable("a", 0)}, health.ProbeAllowed},
		{"a stale disable does not undo a newer enable", []step{enable("b", 20), passed("b", 30), disable("a", 10)}, health.Eligible},
		{"a newer disable after an enable", []step{disable("a", 0), enable("b", 10), passed("b", 20), disable("a", 30)}, health.Disabled},
		{"newest automatic transition wins otherwise", []step{cooled("a", 10), passed("b", 5)}, health.Cooling},
		{"permanent_after is not an operator disable", []step{permanent("a", 0), passed("b", 10)}, health.Eligible},
		{"an eligible at stage operator does not end a disable", []step{disable("a", 0), revived("b", 10)}, health.Disabled},
		{"an enable of an eligible record leaves it eligible", []step{passed("a", 0), enable("b", 10)}, health.Eligible},
		{"an enable of an eligible record beats an older disable", []step{passed("a", 0), enable("b", 20), disable("a", 10)}, health.Eligible},
		{"an enable of a cooling record ends the cooldown", []step{cooled("a", 0), enable("b", 10)}, health.ProbeAllowed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := clustertest.Start(t)
			members := map[string]*Cluster{}
			members["a"], _ = newMember(t, rd, "a", Config{})
			members["b"], _ = newMember(t, rd, "b", Config{})
			base := time.Now().Add(-time.Minute)
			var lastAuto string
			for i, s := range tc.steps {
				rs := health.RemoteState{Key: "k", State: s.state, Stage: s.stage, Reason: health.Refused,
					Detail: "step " + string(rune('0'+i)), At: base.Add(time.Duration(s.at) * time.Millisecond)}
				if operatorAction(s.state, s.stage) {
					rs.Reason = health.Operator
				} else {
					lastAuto = rs.Detail
				}
				if s.state == health.Cooling {
					rs.Until = time.Now().Add(time.Minute)
				}
				if err := members[s.by].write(rs); err != nil {
					t.Fatalf("write %d: %v", i, err)
				}
			}
			rec, err := decodeRecord(rd.Do("GET", "rotor:rec:k"))
			if err != nil {
				t.Fatal(err)
			}
			if rec.State != tc.want.String() {
				t.Fatalf("record state %s (%s by %s), want %s", rec.State, rec.Detail, rec.Inst, tc.want)
			}
			// An automatic transition an operator disable held off is no
			// part of the record's history.
			if tc.want == health.Disabled && rec.Stage == "operator" && lastAuto != "" {
				last := tc.steps[len(tc.steps)-1]
				if !operatorAction(last.state, last.stage) {
					for _, h := range rec.Hist {
						if h.Detail == lastAuto {
							t.Errorf("history lists %q, held off by the disable: %+v", lastAuto, rec.Hist)
						}
					}
				}
			}
		})
	}
}

// TestClusterOutageProbeDoesNotEndDisable is the tester's variant B: an
// instance started while Redis is down probes the upstream (the probe
// passes locally); when Redis returns with its data, the operator's
// disable holds on every instance.
func TestClusterOutageProbeDoesNotEndDisable(t *testing.T) {
	rd := clustertest.Start(t)
	// A 1s resync: b's subscription may start after a's disable.
	cfg := Config{Resync: time.Second}
	a, trA := newMember(t, rd, "a", cfg)
	_, trB := newMember(t, rd, "b", cfg)
	trA.Disable(trA.Lookup("k"), "disabled via admin API")
	waitUntil(t, 3*time.Second, "b sees the disable", func() bool {
		return trB.Snapshot(trB.Lookup("k")).State == health.Disabled
	})
	if got := rd.Do("SAVE"); got != "+OK" {
		t.Fatalf("SAVE: %s", got)
	}
	rd.Stop()
	waitUntil(t, 5*time.Second, "a notices the outage", func() bool { return !a.Connected() })

	c, trC := newOfflineMember(t, rd, "c")
	// c's start-up probe passes locally: its transition waits for Redis.
	c.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Reason: health.ClassNone, Stage: health.StageProbe, Detail: "probe passed", At: time.Now()})

	rd.Start() // with the data saved above
	waitUntil(t, 5*time.Second, "c reconnects", c.Connected)
	waitUntil(t, 5*time.Second, "c applies the fleet's disable", func() bool {
		return trC.Snapshot(trC.Lookup("k")).State == health.Disabled
	})
	rec, err := decodeRecord(rd.Do("GET", "rotor:rec:k"))
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != "disabled" || rec.Inst != "a" {
		t.Fatalf("shared record %s by %s, want disabled by a", rec.State, rec.Inst)
	}
	for _, h := range rec.Hist {
		if strings.Contains(h.Detail, "probe passed") {
			t.Errorf("shared history lists c's held-off probe: %+v", rec.Hist)
		}
	}
	for name, tr := range map[string]*health.Tracker{"a": trA, "b": trB} {
		if got := tr.Snapshot(tr.Lookup("k")).State; got != health.Disabled {
			t.Errorf("%s: %v, want disabled", name, got)
		}
	}
}

// newOfflineMember is newMember for a Redis that is down: it does not wait
// for the connection, and its record "k" starts probe_allowed (a fresh
// instance that has not probed yet).
func newOfflineMember(t *testing.T, rd *clustertest.Redis, inst string) (*Cluster, *health.Tracker) {
	t.Helper()
	tr := health.NewTracker(health.Config{}, nil, zerolog.Nop())
	c, err := New(Config{Redis: rd.URL(), Instance: inst}, tr, zerolog.Nop())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tr.SetFleet(c, c, c.RetryInterval())
	tr.Add("k", "up", nil, false)
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	return c, tr
}
