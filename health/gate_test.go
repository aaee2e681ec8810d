package health

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// eligibleVia is Eligible for r answered as a selection strategy would:
// by g when g knows, else by the tracker.
func eligibleVia(t *Tracker, g *Gate, r *Record) bool {
	if admit, ok := g.Known(); ok {
		return admit
	}
	return t.Eligible(r)
}

// admitTargetVia is AdmitTarget for r, answered like eligibleVia.
func admitTargetVia(t *Tracker, g *Gate, r *Record, host string) bool {
	if admit, ok := g.Known(); ok {
		return admit
	}
	return t.AdmitTarget(r, host)
}

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
			tr.Bind(r, &g, nil, 0)
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
			if tc.want == "ask" && admitTargetVia(tr, &g, r, "shop.example") != tr.AdmitTarget(r, "shop.example") {
				t.Error("admitTargetVia differs from AdmitTarget on an asking gate")
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
	tr.Bind(r, &old, nil, 0)
	tr.Bind(r, &cur, nil, 0)
	tr.Bind(r, &cur, nil, 0) // idempotent
	if gateName(&old) != "ask" || gateName(&cur) != "open" {
		t.Fatalf("old %s, current %s; want ask, open", gateName(&old), gateName(&cur))
	}
	tr.Disable(r, "test")
	if gateName(&old) != "ask" || gateName(&cur) != "shut" {
		t.Fatalf("after disable: old %s, current %s; want ask, shut", gateName(&old), gateName(&cur))
	}
	if eligibleVia(tr, &old, r) || admitTargetVia(tr, &old, r, "") {
		t.Error("the old gate admitted a disabled record")
	}
	var unbound Gate
	if eligibleVia(tr, &unbound, r) {
		t.Error("an unbound gate admitted a disabled record")
	}
}

// rosterMembers returns the members in, per class, in no particular
// order, checking that no member is listed twice.
func rosterMembers(t *testing.T, ro *Roster) map[int]int {
	t.Helper()
	got := map[int]int{} // member -> class
	for k := range ro.Classes() {
		for j := range ro.Len(k) {
			i := ro.Member(k, j)
			if c, dup := got[i]; dup {
				t.Fatalf("member %d listed twice (classes %d and %d)", i, c, k)
			}
			got[i] = k
		}
	}
	if len(got) != ro.In() {
		t.Fatalf("In() = %d, members listed %d", ro.In(), len(got))
	}
	return got
}

// TestRosterFollowsGates: a member is in its roster exactly while its gate
// is not shut, through every kind of change, in its own class; rebinding
// puts it back in the roster it leaves (whose gate now asks).
func TestRosterFollowsGates(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true, SlowStart: 3 * time.Second})
	class := []uint8{0, 1, 0, 2, 1}
	ro := NewRoster(class)
	gates := make([]Gate, len(class))
	recs := make([]*Record, len(class))
	for i := range recs {
		recs[i] = tr.Add(fmt.Sprint(i), fmt.Sprint(i), nil, false)
		tr.Bind(recs[i], &gates[i], ro, i)
	}
	check := func(step string) {
		t.Helper()
		got := rosterMembers(t, ro)
		for i := range gates {
			k, in := got[i]
			if want := gateName(&gates[i]) != "shut"; in != want {
				t.Errorf("%s: member %d in = %v, gate %s", step, i, in, gateName(&gates[i]))
			}
			if in && k != int(class[i]) {
				t.Errorf("%s: member %d in class %d, want %d", step, i, k, class[i])
			}
		}
	}
	check("bound")
	refused := &Failure{Class: Refused, Stage: StageDial}
	tr.Fail(recs[0], refused)
	tr.Fail(recs[2], refused)
	tr.Disable(recs[3], "test")
	check("cooled and disabled")
	tr.Fail(recs[1], &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "shop.example"})
	check("per-target cooldown (asks, stays in)")
	clk.Advance(time.Minute)
	tr.readmitForTest(recs[0])
	check("readmitted, ramping")
	tr.Enable(recs[3])
	tr.Remove("4")
	check("enabled (probe_allowed) and removed")
	if ro.In() != 2 {
		t.Fatalf("In() = %d, want 2 (0 ramping, 1 with a per-target cooldown)", ro.In())
	}
	// Rebinding to a new roster: the old one gets its members back (their
	// gates ask), the new one follows the records.
	ro2 := NewRoster(class)
	gates2 := make([]Gate, len(class))
	for i, r := range recs[:4] {
		tr.Bind(r, &gates2[i], ro2, i)
	}
	if got := rosterMembers(t, ro); len(got) != 4 {
		t.Errorf("old roster after rebind: %v, want the 4 rebound members in (member 4 stays out: removed)", got)
	}
	gates, ro = gates2, ro2 // member 4, never bound, asks and stays in
	check("rebound")
}

// TestRosterConcurrent changes members from several goroutines while
// others read, for the race detector and for the roster's invariants.
func TestRosterConcurrent(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	const n = 64
	class := make([]uint8, n)
	for i := range class {
		class[i] = uint8(i % 3)
	}
	ro := NewRoster(class)
	gates := make([]Gate, n)
	recs := make([]*Record, n)
	for i := range recs {
		recs[i] = tr.Add(fmt.Sprint(i), fmt.Sprint(i), nil, false)
		tr.Bind(recs[i], &gates[i], ro, i)
	}
	var writers, readers sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		writers.Go(func() {
			for j := range 2000 {
				r := recs[(w*17+j)%n]
				if j%2 == 0 {
					tr.Disable(r, "test")
				} else {
					tr.Enable(r)
					tr.readmitForTest(r)
				}
			}
		})
	}
	for range 2 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				for k := range ro.Classes() {
					if c := ro.Len(k); c > 0 {
						if i := ro.Member(k, c-1); i < 0 || i >= n || int(class[i]) != k {
							t.Errorf("class %d lists member %d", k, i)
							return
						}
					}
				}
			}
		})
	}
	writers.Wait()
	close(stop)
	readers.Wait()
	got := rosterMembers(t, ro)
	for i := range gates {
		if _, in := got[i]; in != (gateName(&gates[i]) != "shut") {
			t.Errorf("member %d in = %v, gate %s", i, in, gateName(&gates[i]))
		}
	}
}
