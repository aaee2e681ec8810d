package health

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestExportRestoreRoundTrip(t *testing.T) {
	cfg := Config{StartEligible: true}
	a, clk := newFakeTracker(t, cfg)
	cool := a.Add("cool", "cool", nil, false)
	dis := a.Add("dis", "dis", nil, false)
	short := a.Add("short", "short", nil, false)
	ok := a.Add("ok", "ok", nil, false)
	a.Success(ok)
	a.SuccessTarget(ok, "x.example")
	a.Fail(ok, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "shop.example"})
	a.Fail(cool, &Failure{Class: AuthRejected, Stage: StageProxyAuth}) // 5m
	a.Fail(short, &Failure{Class: Timeout, Stage: StageDial})          // 15s
	a.Disable(dis, "broken")
	clk.Advance(10 * time.Second)
	exp := a.Export()
	if len(exp) != 4 || exp[0].Key != "cool" || exp[3].Key != "short" {
		t.Fatalf("Export order: %+v", exp)
	}
	// The state file is JSON; make sure a snapshot survives encoding.
	b, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	var back []Snapshot
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}

	// Restart ten seconds later on a new tracker.
	clk.Advance(10 * time.Second)
	b2 := NewTracker(Config{Cooldown: CooldownConfig{Jitter: -1}}, clk, a.log)
	for _, s := range back {
		b2.Add(s.Key, s.Name, nil, false)
		if !b2.Restore(s.Key, s) {
			t.Fatalf("Restore(%s) = false", s.Key)
		}
	}
	if b2.Restore("missing", back[0]) {
		t.Error("Restore of an unknown key = true")
	}
	got := map[string]Snapshot{}
	for _, s := range b2.Export() {
		got[s.Key] = s
	}
	if s := got["cool"]; s.State != Cooling || !s.Until.Equal(exp[0].Until) || s.Reason != AuthRejected {
		t.Errorf("cooling record: %v until %v (want %v)", s.State, s.Until, exp[0].Until)
	}
	if b2.Admit(b2.Lookup("cool")) {
		t.Error("restored cooling record admitted")
	}
	clk.Advance(5*time.Minute - 20*time.Second - time.Nanosecond)
	if s := b2.Snapshot(b2.Lookup("cool")); s.State != Cooling {
		t.Errorf("deadline moved: %v", s.State)
	}
	clk.Advance(time.Nanosecond)
	if s := b2.Snapshot(b2.Lookup("cool")); s.State != ProbeAllowed {
		t.Errorf("restored deadline not honoured: %v", s.State)
	}
	if s := got["dis"]; s.State != Disabled || s.Reason != Operator || s.Detail != "broken" {
		t.Errorf("disabled record: %+v", s)
	}
	if s := got["short"]; s.State != ProbeAllowed {
		t.Errorf("past deadline: %v, want probe_allowed", s.State)
	}
	if s := got["ok"]; s.State != ProbeAllowed || s.Successes != 2 || len(s.Targets) != 1 || s.Targets[0].Host != "shop.example" {
		t.Errorf("eligible record: %+v", s)
	}
	// Counters and history survive; one entry is added where the state changed.
	for _, want := range back {
		g := got[want.Key]
		if !reflect.DeepEqual(g.Failures, want.Failures) || !reflect.DeepEqual(g.Counts, want.Counts) || g.Successes != want.Successes {
			t.Errorf("%s counters: got %v %v, want %v %v", want.Key, g.Failures, g.Counts, want.Failures, want.Counts)
		}
		if len(g.History) < len(want.History) || !reflect.DeepEqual(g.History[:len(want.History)], want.History) {
			t.Errorf("%s history: got %+v, want prefix %+v", want.Key, g.History, want.History)
		}
	}
}
