package health

import (
	"testing"
	"time"
)

func TestSlowStartRamp(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true, SlowStart: 4 * time.Second, SlowStartRate: 3})
	r := tr.Add("k", "up", nil, false)
	if !tr.Admit(r) {
		t.Fatal("a start-eligible record has no ramp")
	}
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	clk.Advance(30 * time.Second)
	tr.readmitForTest(r)
	for sec, want := range []int{3, 6, 12, 24} {
		got := 0
		for range 100 {
			if tr.Admit(r) {
				got++
			}
		}
		if got != want {
			t.Errorf("second %d: admitted %d, want %d", sec, got, want)
		}
		if !tr.Snapshot(r).SlowStart {
			t.Errorf("second %d: SlowStart = false", sec)
		}
		clk.Advance(time.Second)
	}
	for range 1000 {
		if !tr.Admit(r) {
			t.Fatal("ramp did not lift after SlowStart")
		}
	}
	if tr.Snapshot(r).SlowStart {
		t.Error("SlowStart still true")
	}
}

func TestSlowStartDisabled(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true, SlowStart: -1})
	r := tr.Add("k", "up", nil, false)
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	clk.Advance(time.Minute)
	tr.readmitForTest(r)
	for range 100 {
		if !tr.Admit(r) {
			t.Fatal("refused with slow start disabled")
		}
	}
}

func TestRampWakeSchedule(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true, SlowStart: 2500 * time.Millisecond, SlowStartRate: 1})
	r := tr.Add("k", "up", nil, false)
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	clk.Advance(time.Minute)
	start := clk.Now()
	tr.readmitForTest(r)
	tr.sched.popDue(clk.Now(), nil) // drop the stale probe item
	var wakes []time.Duration
	for range 10 {
		for range 10 {
			tr.Admit(r) // the window's few slots run out: someone is refused
		}
		_, at, ok := tr.sched.popDue(clk.Now(), nil)
		if !ok {
			break
		}
		clk.Advance(at.Sub(clk.Now()))
		due, _, _ := tr.sched.popDue(clk.Now(), nil)
		wake, nx := tr.rampWake(r, due[0])
		if !wake {
			t.Errorf("window at %v did not wake refused waiters", at.Sub(start))
		}
		wakes = append(wakes, at.Sub(start))
		if nx != nil {
			tr.sched.push(*nx)
		}
	}
	want := []time.Duration{time.Second, 2 * time.Second, 2500 * time.Millisecond}
	if len(wakes) != len(want) || wakes[0] != want[0] || wakes[1] != want[1] || wakes[2] != want[2] {
		t.Errorf("wakes at %v, want %v", wakes, want)
	}
}
