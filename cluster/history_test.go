package cluster

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// details lists the details of h, without the instance suffix.
func details(h []health.Transition) []string {
	var out []string
	for _, tr := range h {
		d := tr.Detail
		if i := strings.Index(d, " (instance "); i >= 0 {
			d = d[:i]
		}
		out = append(out, d)
	}
	return out
}

// waitDetails waits until get lists want, and fails with what it lists.
func waitDetails(t *testing.T, what string, get func() []string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := get()
		if strings.Join(got, ",") == strings.Join(want, ",") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: history %q, want %q", what, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func storedDetails(rec record) []string {
	var out []string
	for _, h := range rec.Hist {
		out = append(out, h.Detail)
	}
	return out
}

// TestClusterEmptyRestartKeepsHistory is the tester's repro: three
// instances share six transitions of k; Redis goes down; each instance
// changes k meanwhile (a and b see it fail, then c disables it); Redis
// restarts empty. The history from before the outage and the outage's
// transitions are merged, in time order, on every instance and in Redis.
// Bug: each instance's queued write, the first thing the empty Redis
// held, replaced the instance's history (SetHistory) and the others'
// (ApplyRemote) with its one entry before the instances put their records
// back, so what they put back was already cut: the history from before
// the outage was gone for good.
func TestClusterEmptyRestartKeepsHistory(t *testing.T) {
	rd := clustertest.Start(t)
	cfg := Config{Resync: time.Second}
	a, trA := newMember(t, rd, "a", cfg)
	b, trB := newMember(t, rd, "b", cfg)
	c, trC := newMember(t, rd, "c", cfg)
	members := []*Cluster{a, b, c}
	trackers := map[string]*health.Tracker{"a": trA, "b": trB, "c": trC}

	base := time.Now().Add(-time.Minute)
	var before []string
	for i := range 6 {
		rs := health.RemoteState{Key: "k", State: health.Cooling, From: health.ProbeAllowed, Reason: health.Refused,
			Stage: health.StageProbe, Detail: fmt.Sprintf("before %d", i), At: base.Add(time.Duration(i) * time.Second),
			Until: base.Add(time.Duration(i)*time.Second + 500*time.Millisecond)}
		if i%2 == 1 {
			rs.State, rs.Reason, rs.Until = health.Eligible, health.ClassNone, time.Time{}
		}
		if err := members[i%3].write(rs); err != nil {
			t.Fatal(err)
		}
		before = append(before, rs.Detail)
	}
	for name, tr := range trackers {
		waitDetails(t, name+" before the outage", func() []string { return details(tr.Snapshot(tr.Lookup("k")).History) }, before)
	}

	rd.Stop()
	for _, m := range members {
		waitUntil(t, 5*time.Second, m.Instance()+" notices the outage", func() bool { return !m.Connected() })
	}
	fail := &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("refused in the outage")}
	trA.Fail(trA.Lookup("k"), fail)
	time.Sleep(5 * time.Millisecond) // distinct millisecond stamps
	trB.Fail(trB.Lookup("k"), fail)
	time.Sleep(5 * time.Millisecond)
	trC.Disable(trC.Lookup("k"), "disabled in the outage")
	want := append(append([]string(nil), before...), "refused in the outage", "refused in the outage", "disabled in the outage")

	rd.Start() // empty
	waitDetails(t, "redis", func() []string { return storedDetails(storedRecord(t, rd)) }, want)
	for name, tr := range trackers {
		waitDetails(t, name, func() []string { return details(tr.Snapshot(tr.Lookup("k")).History) }, want)
	}
	rec := storedRecord(t, rd)
	for i := 1; i < len(rec.Hist); i++ {
		if rec.Hist[i].At < rec.Hist[i-1].At {
			t.Errorf("history out of order: %+v", rec.Hist)
		}
	}
	if rec.State != "disabled" || rec.Inst != "c" {
		t.Errorf("record %s by %s, want c's disable", rec.State, rec.Inst)
	}
}

// TestClusterHistoryOrderFree: an operator's disable and a failure made
// before it on another instance (both queued in an outage) end in the
// same shared history whichever reaches Redis first. Bug: written after
// the disable, the failure was held off the history as if it had come
// after it; written before, it stayed.
func TestClusterHistoryOrderFree(t *testing.T) {
	base := time.Now().Add(-time.Minute)
	failure := health.RemoteState{Key: "k", State: health.Cooling, From: health.Eligible, Reason: health.Refused,
		Stage: health.StageDial, Detail: "refused", At: base, Until: base.Add(time.Second)}
	disable := health.RemoteState{Key: "k", State: health.Disabled, From: health.Eligible, Reason: health.Operator,
		Stage: health.StageOperator, Detail: "maintenance", At: base.Add(time.Second)}
	for _, tc := range []struct {
		name  string
		first bool // the failure reaches Redis first
	}{{"failure first", true}, {"disable first", false}} {
		t.Run(tc.name, func(t *testing.T) {
			rd := clustertest.Start(t)
			a, _ := newMember(t, rd, "a", Config{})
			b, _ := newMember(t, rd, "b", Config{})
			writes := []func() error{func() error { return b.write(failure) }, func() error { return a.write(disable) }}
			if !tc.first {
				writes[0], writes[1] = writes[1], writes[0]
			}
			for _, w := range writes {
				if err := w(); err != nil {
					t.Fatal(err)
				}
			}
			rec := storedRecord(t, rd)
			if got := strings.Join(storedDetails(rec), ","); got != "refused,maintenance" || rec.State != "disabled" {
				t.Errorf("record %s, history %q, want disabled with refused,maintenance", rec.State, got)
			}
		})
	}
}
