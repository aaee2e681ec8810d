package health

import (
	"strings"
	"testing"
	"time"
)

// TestTargetFailureOthersReachLater: a record that failed a host:port at
// the target, and fails it again after another record reached it, is the
// one that cannot get there (its retry may have failed too, or the
// request could not be retried: the others' success came from another
// request). Issue: such a record stayed eligible for that host for as
// long as it was broken, unless it failed two hosts (the target rule).
// Want: it cools for that host:port only, as upstream_error at the
// failure's stage, and stays eligible; when nobody reached the host
// between its failures (the host is down), nothing cools.
func TestTargetFailureOthersReachLater(t *testing.T) {
	const h, other = "shop.example:443", "news.example:443"
	tf := func(c Class, st Stage, target string) *Failure { return &Failure{Class: c, Stage: st, Target: target} }
	cases := []struct {
		name        string
		class       Class
		stage       Stage
		reachedThen bool // another record reaches h between the failures
		wantCooled  bool
	}{
		{"unreachable, others reach it after", TargetUnreachable, StageTargetConnect, true, true},
		{"timeout, others reach it after", TargetTimeout, StageTargetConnect, true, true},
		{"plain-HTTP closed unanswered, others reach it after", TargetUnreachable, StageFirstByte, true, true},
		{"nobody reaches it after (the host is down)", TargetUnreachable, StageTargetConnect, false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{StartEligible: true})
			bad := tr.Add("bad", "bad", nil, false)
			good := tr.Add("good", "good", nil, false)
			tr.SuccessTarget(good, h)
			clk.Advance(time.Second)
			tr.Fail(bad, tf(tc.class, tc.stage, h))
			clk.Advance(time.Second)
			if tc.reachedThen {
				tr.SuccessTarget(good, h)
				clk.Advance(time.Second)
			}
			if s := tr.Snapshot(bad); len(s.Targets) != 0 {
				t.Fatalf("one failure cooled bad for %+v", s.Targets)
			}
			tr.Fail(bad, tf(tc.class, tc.stage, h))
			s := tr.Snapshot(bad)
			if s.State != Eligible {
				t.Errorf("bad: %v %v/%v, want eligible: one host never cools it whole", s.State, s.Reason, s.Stage)
			}
			if !tc.wantCooled {
				if len(s.Targets) != 0 || len(s.History) != 0 {
					t.Errorf("the host's outage cooled bad: targets %+v, history %+v", s.Targets, s.History)
				}
				return
			}
			if len(s.Targets) != 1 || s.Targets[0].Host != h || s.Targets[0].Reason != UpstreamError || s.Targets[0].Stage != tc.stage {
				t.Fatalf("targets %+v, want upstream_error/%v for %s only", s.Targets, tc.stage, h)
			}
			if n := len(s.History); n != 1 || !strings.Contains(s.History[0].Detail, "other upstreams reach "+h) {
				t.Errorf("history %+v, want one entry saying other upstreams reach %s", s.History, h)
			}
			if s.Failures[UpstreamError] != 1 || s.Failures[tc.class] != 2 {
				t.Errorf("failures %v, want 2 %v and the cooling's 1 upstream_error", s.Failures, tc.class)
			}
			if !tr.AdmitTarget(bad, other) || tr.AdmitTarget(bad, h) {
				t.Errorf("admission: %s %v, %s %v; want the other host only", other, tr.AdmitTarget(bad, other), h, tr.AdmitTarget(bad, h))
			}
		})
	}
}
