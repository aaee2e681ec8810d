package health

import (
	"slices"
	"testing"
	"time"
)

// TestTargetOutageCoolsNoOne: an outage of the targets themselves cools no
// upstream. Issue: 5 upstreams; two hosts at the same port served 10
// requests alternating hosts, spread over the upstreams; then both went
// down and 10 more requests each got target_unreachable. The target rule
// took the successes from before the outage as "other upstreams reach
// these hosts" and cooled 3 of the 5 healthy upstreams for ~30 s
// (upstream_error / target_connect). Only a success that came after (or
// at the time of) a failure shows that the host was up while this
// upstream could not reach it.
func TestTargetOutageCoolsNoOne(t *testing.T) {
	hosts := []string{"127.0.0.2:8081", "127.0.0.3:8081"}
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	recs := addRecords(tr, 5)
	for i := range 10 {
		tr.SuccessTarget(recs[i%len(recs)], hosts[i%2])
		clk.Advance(100 * time.Millisecond)
	}
	clk.Advance(time.Second) // both targets are killed
	for i := range 10 {
		tr.Fail(recs[i%len(recs)], unreachableAt(hosts[i%2]))
		clk.Advance(100 * time.Millisecond)
	}
	for _, r := range recs {
		if s := tr.Snapshot(r); s.State != Eligible || len(s.History) != 0 {
			t.Errorf("%s: %v %v/%v %q: the targets' outage cooled a healthy upstream", s.Name, s.State, s.Reason, s.Stage, s.Detail)
		}
	}
}

// TestTargetRuleNeedsReachAfterFailure: the rule's evidence is another
// upstream reaching the host:port at or after this upstream's failure for
// it, within the window; earlier successes say only that the host was up
// then.
func TestTargetRuleNeedsReachAfterFailure(t *testing.T) {
	const a, b, c = "a.example:443", "b.example:443", "c.example:443"
	tests := []struct {
		name string
		run  func(tr *Tracker, adv func(time.Duration), bad, good *Record)
		want State
	}{
		{"reached only before the failures", func(tr *Tracker, adv func(time.Duration), bad, good *Record) {
			tr.SuccessTarget(good, a)
			tr.SuccessTarget(good, b)
			adv(time.Second)
			tr.Fail(bad, unreachableAt(a))
			tr.Fail(bad, unreachableAt(b))
			tr.Fail(bad, unreachableAt(c))
		}, Eligible},
		{"reached after the failures", func(tr *Tracker, adv func(time.Duration), bad, good *Record) {
			tr.Fail(bad, unreachableAt(a))
			tr.Fail(bad, unreachableAt(b))
			adv(time.Second)
			tr.SuccessTarget(good, a)
			tr.SuccessTarget(good, b)
			adv(time.Second)
			tr.Fail(bad, unreachableAt(c)) // the rule is weighed at a failure
		}, Cooling},
		{"a repeated failure keeps the evidence since the first", func(tr *Tracker, adv func(time.Duration), bad, good *Record) {
			tr.Fail(bad, unreachableAt(a))
			tr.Fail(bad, unreachableAt(b))
			adv(time.Second)
			tr.SuccessTarget(good, a)
			tr.SuccessTarget(good, b)
			adv(time.Second)
			tr.Fail(bad, unreachableAt(a))
		}, Cooling},
		{"at the same time", func(tr *Tracker, adv func(time.Duration), bad, good *Record) {
			tr.SuccessTarget(good, a)
			tr.Fail(bad, unreachableAt(a))
			tr.SuccessTarget(good, b)
			tr.Fail(bad, unreachableAt(b))
		}, Cooling},
		{"one host reached after, one only before", func(tr *Tracker, adv func(time.Duration), bad, good *Record) {
			tr.SuccessTarget(good, b)
			adv(time.Second)
			tr.Fail(bad, unreachableAt(a))
			tr.Fail(bad, unreachableAt(b))
			adv(time.Second)
			tr.SuccessTarget(good, a)
			tr.Fail(bad, unreachableAt(c))
		}, Eligible},
		{"reached after, but the failure left the window", func(tr *Tracker, adv func(time.Duration), bad, good *Record) {
			tr.Fail(bad, unreachableAt(a))
			adv(59 * time.Second)
			tr.SuccessTarget(good, a)
			tr.Fail(bad, unreachableAt(b))
			adv(2 * time.Second)
			tr.SuccessTarget(good, b)
			tr.Fail(bad, unreachableAt(c))
		}, Eligible},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{StartEligible: true})
			bad := tr.Add("bad", "bad", nil, false)
			good := tr.Add("good", "good", nil, false)
			tt.run(tr, clk.Advance, bad, good)
			s := tr.Snapshot(bad)
			if s.State != tt.want {
				t.Fatalf("state = %v, want %v (history %+v)", s.State, tt.want, s.History)
			}
			if tt.want == Cooling && (s.Reason != UpstreamError || s.Stage != StageTargetConnect) {
				t.Errorf("reason %v stage %v, want upstream_error target_connect", s.Reason, s.Stage)
			}
		})
	}
}

// TestTargetRuleCountsFailure: a cooling by the target rule is one
// upstream_error failure at target_connect, like any other cooling. Issue:
// the record showed reason upstream_error, stage target_connect and two
// history entries, but failures, failures_by_stage and the failure
// metrics (read from Stats) never counted it.
func TestTargetRuleCountsFailure(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	bad := tr.Add("bad", "bad", nil, false)
	good := tr.Add("good", "good", nil, false)
	for _, h := range []string{"a.example:443", "b.example:443"} {
		tr.Fail(bad, unreachableAt(h))
		tr.SuccessTarget(good, h)
	}
	tr.Fail(bad, unreachableAt("c.example:443"))
	s := tr.Snapshot(bad)
	if s.State != Cooling || s.Reason != UpstreamError || s.Stage != StageTargetConnect {
		t.Fatalf("%v %v/%v, want cooling upstream_error/target_connect", s.State, s.Reason, s.Stage)
	}
	want := []FailureCount{
		{Class: UpstreamError, Stage: StageTargetConnect, N: 1},
		{Class: TargetUnreachable, Stage: StageTargetConnect, N: 3},
	}
	if !slices.Equal(s.Counts, want) {
		t.Errorf("Snapshot.Counts = %+v, want %+v", s.Counts, want)
	}
	if s.Failures[UpstreamError] != 1 || s.Stages[StageTargetConnect] != 4 {
		t.Errorf("Failures %v Stages %v, want upstream_error 1 and target_connect 4", s.Failures, s.Stages)
	}
	if got := tr.Stats(bad, nil).Counts; !slices.Equal(got, want) {
		t.Errorf("Stats.Counts (the metrics) = %+v, want %+v", got, want)
	}
}

// TestFlappingTargetCoolsNoOne: a target down now and then for everyone
// (every upstream fails it in its down spells, and reaches it in its up
// spells) cools no upstream, for it or whole. Bug: "another upstream
// reached it after my failure" held for every upstream, so each was
// cooled for the site, and two such sites cooled healthy upstreams
// whole: a pool outage for every other site.
func TestFlappingTargetCoolsNoOne(t *testing.T) {
	hosts := []string{"127.0.0.5:43780", "127.0.0.6:43780"}
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	recs := addRecords(tr, 3)
	i := 0
	for cycle := range 6 {
		for range 10 { // up 1 s
			tr.SuccessTarget(recs[i%len(recs)], hosts[i%2])
			i++
			clk.Advance(100 * time.Millisecond)
		}
		for range 10 { // down 1 s
			tr.Fail(recs[i%len(recs)], unreachableAt(hosts[i%2]))
			i++
			clk.Advance(100 * time.Millisecond)
		}
		for _, r := range recs {
			if s := tr.Snapshot(r); s.State != Eligible || len(s.Targets) != 0 {
				t.Fatalf("cycle %d, %s: %v %v/%v %q, %d per-target cooldowns: a flapping site cooled a healthy upstream",
					cycle, s.Name, s.State, s.Reason, s.Stage, s.Detail, len(s.Targets))
			}
		}
	}
}

// unreachableAt is a target_unreachable failure at target_connect for
// target, a host:port.
func unreachableAt(target string) *Failure {
	return &Failure{Class: TargetUnreachable, Stage: StageTargetConnect, Target: target}
}

// addRecords adds n records to tr, keyed and named "a", "b", ….
func addRecords(tr *Tracker, n int) []*Record {
	recs := make([]*Record, n)
	for i := range recs {
		k := string(rune('a' + i))
		recs[i] = tr.Add(k, k, nil, false)
	}
	return recs
}
