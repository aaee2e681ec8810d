package health

import (
	"testing"
	"time"
)

func gateName(g *Gate) string {
	return [...]string{gateAsk: "ask", gateOpen: "open", gateShut: "shut"}[g.w.Load()]
}

// TestGateFollowsRecord drives a record through every kind of change and
// checks after each step what its gate publishes, and that a gate which
// answers agrees with the tracker.
func TestGateFollowsRecord(t *testing.T) {
	ban := &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "shop.example"}
	type env struct {
		tr  *Tracker
		clk interface{ Advance(time.Duration) }
		r   *Record
	}
	tests := []struct {
		name string
		cfg  Config
		step func(e env)
		want string
	}{
		{"bound eligible", Config{StartEligible: true}, func(env) {}, "open"},
		{"bound probe_allowed", Config{}, func(env) {}, "shut"},
		{"cooling", Config{StartEligible: true}, func(e env) {
			e.tr.Fail(e.r, &Failure{Class: Refused, Stage: StageDial})
		}, "shut"},
		{"ramping after recovery", Config{StartEligible: true, SlowStart: 3 * time.Second}, func(e env) {
			e.tr.Fail(e.r, &Failure{Class: Refused, Stage: StageDial})
			e.clk.Advance(time.Minute)
			e.tr.readmitForTest(e.r)
		}, "ask"},
		{"ramp lifted by a pick", Config{StartEligible: true, SlowStart: 3 * time.Second}, func(e env) {
			e.tr.Fail(e.r, &Failure{Class: Refused, Stage: StageDial})
			e.clk.Advance(time.Minute)
			e.tr.readmitForTest(e.r)
			e.clk.Advance(3 * time.Second)
			e.tr.Admit(e.r)
		}, "open"},
		{"recovery without slow start", Config{StartEligible: true, SlowStart: -1}, func(e env) {
			e.tr.Fail(e.r, &Failure{Class: Refused, Stage: StageDial})
			e.clk.Advance(time.Minute)
			e.tr.readmitForTest(e.r)
		}, "open"},
		{"per-target cooldown", Config{StartEligible: true}, func(e env) {
			e.tr.Fail(e.r, ban)
		}, "ask"},
		{"per-target cooldown forgotten", Config{StartEligible: true}, func(e env) {
			e.tr.Fail(e.r, ban)
			e.clk.Advance(time.Hour)
			e.tr.SuccessTarget(e.r, "shop.example")
		}, "open"},
		{"disabled", Config{StartEligible: true}, func(e env) { e.tr.Disable(e.r, "test") }, "shut"},
		{"enabled", Config{StartEligible: true}, func(e env) {
			e.tr.Disable(e.r, "test")
			e.tr.Enable(e.r)
		}, "shut"}, // probe_allowed until a probe passes
		{"removed", Config{StartEligible: true}, func(e env) { e.tr.Remove("k") }, "shut"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, tc.cfg)
			r := tr.Add("k", "up", nil, false)
			var g Gate
			tr.Bind(r, &g)
			tc.step(env{tr, clk, r})
			if got := gateName(&g); got != tc.want {
				t.Fatalf("gate %s, want %s", got, tc.want)
			}
			for _, host := range []string{"", "shop.example", "news.example"} {
				switch got := gateName(&g); {
				case got == "open" && (!tr.Eligible(r) || !tr.AdmitTarget(r, host)):
					t.Errorf("gate open, tracker refuses %q", host)
				case got == "shut" && (tr.Eligible(r) || tr.AdmitTarget(r, host)):
					t.Errorf("gate shut, tracker admits %q", host)
				}
			}
			if tc.want == "ask" && tr.AdmitTargetVia(&g, r, "shop.example") != tr.AdmitTarget(r, "shop.example") {
				t.Error("AdmitTargetVia differs from AdmitTarget on an asking gate")
			}
		})
	}
}

// TestGateRebind: a record publishes to its latest gate only; the one it
// left asks the tracker, so a holder of an old snapshot is never misled.
func TestGateRebind(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, false)
	var old, cur Gate
	tr.Bind(r, &old)
	tr.Bind(r, &cur)
	tr.Bind(r, &cur) // idempotent
	if gateName(&old) != "ask" || gateName(&cur) != "open" {
		t.Fatalf("old %s, current %s; want ask, open", gateName(&old), gateName(&cur))
	}
	tr.Disable(r, "test")
	if gateName(&old) != "ask" || gateName(&cur) != "shut" {
		t.Fatalf("after disable: old %s, current %s; want ask, shut", gateName(&old), gateName(&cur))
	}
	if tr.EligibleVia(&old, r) || tr.AdmitTargetVia(&old, r, "") {
		t.Error("the old gate admitted a disabled record")
	}
	var unbound Gate
	if tr.EligibleVia(&unbound, r) {
		t.Error("an unbound gate admitted a disabled record")
	}
}
