package health

import "testing"

// TestCredentialsChangeEndsHostAuthCooldowns: a password fix, or an
// operator's enable, ends the per-host auth_rejected cooldowns; a
// target's own ban stays (TestTargetScopeWhileOut). Issue: a forwarded
// request's 407 cooled an upstream for its host for 5 minutes; after the
// password was fixed (and the probe through the same host passed), and
// after POST /enable, every request to that host still got 503 "cooling
// for this host only" until the cooldown ran out.
func TestCredentialsChangeEndsHostAuthCooldowns(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, false)
	tr.Fail(r, &Failure{Class: AuthRejected, Stage: StageProxyAuth, Target: "a.example:80", Scope: ScopeTarget}) // a forwarded request's 407
	tr.Fail(r, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "b.example:80", Scope: ScopeTarget})
	if !tr.TargetCooling(r, "a.example:80") || !tr.TargetCooling(r, "b.example:80") {
		t.Fatalf("set-up: per-host cooldowns not made: %+v", tr.Snapshot(r))
	}
	if c, _ := tr.TargetCoolingReason(r, "a.example:80"); c != AuthRejected {
		t.Errorf("reason for a.example = %v, want auth_rejected", c)
	}
	tr.CredentialsChanged(r)
	if tr.TargetCooling(r, "a.example:80") {
		t.Errorf("after a credentials change: still cooling for a.example (auth_rejected)")
	}
	if !tr.TargetCooling(r, "b.example:80") {
		t.Errorf("after a credentials change: the target_http_error ban of b.example ended too")
	}
	if !tr.AdmitTarget(r, "a.example:80") {
		t.Errorf("a.example not admitted after the credentials change")
	}
	tr.Fail(r, &Failure{Class: AuthRejected, Stage: StageProxyAuth, Target: "c.example:80", Scope: ScopeTarget})
	if err := tr.Enable(r); err != nil {
		t.Fatal(err)
	}
	if tr.TargetCooling(r, "c.example:80") {
		t.Errorf("after an operator's enable: still cooling for c.example (auth_rejected)")
	}
	if !tr.TargetCooling(r, "b.example:80") {
		t.Errorf("after an operator's enable: the target_http_error ban of b.example ended")
	}
	if n := len(tr.Snapshot(r).Targets); n != 1 {
		t.Errorf("snapshot lists %d per-host cooldowns, want 1 (b.example)", n)
	}
}
