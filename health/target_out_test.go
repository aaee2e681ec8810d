package health

import (
	"slices"
	"testing"
	"time"
)

// TestTargetScopeWhileOut: a failure for one host (target_http_error or
// slow_body with scope "target", a policy refusal) cools the record for
// that host whatever the record's own state. A report made while the
// record cooled used to be only counted: it showed in neither targets nor
// history, and once re-admitted the record served the host that had
// banned it. A failure without a host on a record that is out stays
// count-only, and per-host cooldowns stay local in fleet mode.
func TestTargetScopeWhileOut(t *testing.T) {
	ban := func(host string) *Failure {
		return &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: host}
	}
	for _, tc := range []struct {
		name string
		out  func(tr *Tracker, r *Record) // takes r out of eligible
		want State
	}{
		{"cooling", func(tr *Tracker, r *Record) { tr.Fail(r, ban("")) }, Cooling},
		{"disabled", func(tr *Tracker, r *Record) { tr.Disable(r, "bad exit") }, Disabled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}, ScopeSlowBody: ScopeTarget})
			ff := &fakeFleet{grant: true}
			tr.SetFleet(ff, ff, time.Second)
			r := tr.Add("k", "up", &pipeUpstream{}, false)
			drive(t, tr) // first probe passes
			epoch := tr.Epoch(r)
			tc.out(tr, r)
			before := tr.Snapshot(r)
			if before.State != tc.want {
				t.Fatalf("state %v, want %v", before.State, tc.want)
			}
			pubBefore, _, _ := ff.snapshot()
			clk.Advance(50 * time.Second) // the per-host cooldowns outlast the record's (60s)

			tr.Fail(r, ban("[::1]:443"))
			tr.Fail(r, ban("example.com"))
			tr.Fail(r, &Failure{Class: UpstreamError, Stage: StageProxyHandshake, Target: "plain.example:443", Scope: ScopeTarget})
			tr.FailEpoch(r, epoch, &Failure{Class: SlowBody, Stage: StageBody, Target: "slow.example:80"}) // a lease from before
			tr.Fail(r, ban(""))                                                                            // no host: counted only
			tr.FailStale(r, ban("stale.example"))                                                          // counted only

			s := tr.Snapshot(r)
			if s.State != tc.want || !s.Until.Equal(before.Until) {
				t.Errorf("state %v until %v, want %v until %v: a failure drove a record that is out", s.State, s.Until, tc.want, before.Until)
			}
			var hosts []string
			for _, x := range s.Targets {
				hosts = append(hosts, x.Host)
			}
			slices.Sort(hosts)
			if want := []string{"::1", "example.com", "plain.example", "slow.example"}; !slices.Equal(hosts, want) {
				t.Errorf("targets %v, want %v", hosts, want)
			}
			var hist []string
			for _, h := range s.History[len(before.History):] {
				if h.From != tc.want || h.To != tc.want {
					t.Errorf("history entry %+v changed the state", h)
				}
				hist = append(hist, h.Target)
			}
			slices.Sort(hist)
			if want := []string{"::1", "example.com", "plain.example", "slow.example"}; !slices.Equal(hist, want) {
				t.Errorf("history targets %v, want %v", hist, want)
			}
			if got := s.Failures[TargetHTTPError] - before.Failures[TargetHTTPError]; got != 4 {
				t.Errorf("target_http_error counted %d more, want 4", got)
			}
			if pub, _, _ := ff.snapshot(); len(pub) != len(pubBefore) {
				t.Errorf("per-host cooldowns published to the fleet: %+v", pub[len(pubBefore):])
			}

			// Back in service (the cooldown ran out and a probe passed,
			// or an operator enabled it): the hosts stay avoided.
			if tc.want == Disabled {
				tr.Enable(r)
			} else {
				clk.Advance(before.Until.Sub(clk.Now()))
			}
			drive(t, tr)
			if st := tr.Snapshot(r).State; st != Eligible {
				t.Fatalf("not re-admitted: %v", st)
			}
			for _, h := range []string{"[::1]:443", "example.com", "plain.example", "slow.example"} {
				if tr.AdmitTarget(r, h) {
					t.Errorf("re-admitted record serves %s, which it was banned for while out", h)
				}
			}
			if !tr.AdmitTarget(r, "other.example") || !tr.AdmitTarget(r, "stale.example") {
				t.Error("other hosts refused")
			}
		})
	}
}
