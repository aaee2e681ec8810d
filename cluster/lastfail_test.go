package cluster

import (
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// TestClusterForeignAuthRejectedIsNoLastFailure: y's credentials (a stale
// password) are rejected; x, whose credentials work, lists y's failure in
// the shared history but does not show it as the upstream's last failure,
// neither when it arrives nor after a later record (w's probe) is
// applied. Bug: x's admin API showed auth_rejected as its last failure.
func TestClusterForeignAuthRejectedIsNoLastFailure(t *testing.T) {
	rd := clustertest.Start(t)
	_, trX, _ := newCredMember(t, rd, "x", "new-secret")
	y, _, _ := newCredMember(t, rd, "y", "old-secret")
	w, _, _ := newCredMember(t, rd, "w", "new-secret")
	waitSubscribed(t, rd, 3)

	y.Publish(authRejected(time.Now()))
	waitUntil(t, 3*time.Second, "x lists y's failure", func() bool { return historyHas(trX, "proxy rejected") })
	if s := trX.Snapshot(trX.Lookup("k")); s.State != health.Eligible || s.Reason == health.AuthRejected {
		t.Errorf("x after y's failure: %v, last failure %v %q; want eligible, not y's auth_rejected", s.State, s.Reason, s.Detail)
	}

	time.Sleep(5 * time.Millisecond)
	w.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now()})
	waitUntil(t, 3*time.Second, "x lists w's probe", func() bool { return historyHas(trX, "probe passed") })
	if s := trX.Snapshot(trX.Lookup("k")); s.Reason == health.AuthRejected {
		t.Errorf("x after w's probe: last failure %v %q, not x's", s.Reason, s.Detail)
	}
}
