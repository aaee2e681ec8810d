package cluster

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// proxyAuthFailure is what an upstream's refusal of this instance's
// credentials looks like to the tracker.
func proxyAuthFailure() *health.Failure {
	return &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth, Err: errors.New("proxy rejected the credentials")}
}

// historyHas reports whether tr's record "k" lists an entry whose detail
// starts with prefix.
func historyHas(tr *health.Tracker, prefix string) bool {
	for _, h := range tr.Snapshot(tr.Lookup("k")).History {
		if strings.HasPrefix(h.Detail, prefix) {
			return true
		}
	}
	return false
}

// TestClusterStaleCredentialsKeepTheirCooling: y, with a stale password,
// had its credentials rejected; x's (another password) work, and x's
// probe passes. y keeps its own auth_rejected cooling (x's eligible says
// nothing of y's password) and does not take x's eligible as settling its
// own probe; y's next failure is listed in the shared history but does
// not overwrite the fleet's eligible record. Bug: y adopted x's eligible,
// failed again, and wrote its cooling over the fleet's record, over and
// over.
func TestClusterStaleCredentialsKeepTheirCooling(t *testing.T) {
	rd := clustertest.Start(t)
	x, trX, _ := newCredMember(t, rd, "x", "new-secret")
	y, trY, logsY := newCredMember(t, rd, "y", "old-secret")
	waitSubscribed(t, rd, 2)

	trY.Fail(trY.Lookup("k"), proxyAuthFailure())
	waitUntil(t, 3*time.Second, "y's failure stored", func() bool { return storedRecord(t, rd).State == "cooling" })
	waitUntil(t, 3*time.Second, "x lists y's failure", func() bool { return historyHas(trX, "proxy rejected") })
	if s := stateOf(trX); s != health.Eligible {
		t.Fatalf("x: %v, want eligible", s)
	}

	// x's probe passes (with x's credentials).
	time.Sleep(5 * time.Millisecond)
	x.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now()})
	waitUntil(t, 3*time.Second, "x's eligible stored", func() bool { return storedRecord(t, rd).State == "eligible" })
	waitUntil(t, 3*time.Second, "y lists x's probe", func() bool { return historyHas(trY, "probe passed") })
	if s := stateOf(trY); s != health.Cooling {
		t.Errorf("y (stale password) after x's probe: %v, want its own cooling", s)
	}
	// x's eligible does not settle y's probe: y probes with its own
	// credentials (the lease is y's).
	release, ok := y.TryProbe("k")
	if !ok {
		t.Errorf("y's probe was settled by x's eligible (other credentials)")
	} else {
		release()
		waitUntil(t, 3*time.Second, "y's lease released", func() bool { return rd.Do("GET", "rotor:lease:k") == "" })
	}

	// y fails again: the failure joins the shared history, the fleet's
	// record stays x's eligible.
	time.Sleep(5 * time.Millisecond)
	y.Publish(authRejected(time.Now()))
	waitUntil(t, 3*time.Second, "y's second failure listed", func() bool {
		n := 0
		for _, h := range storedRecord(t, rd).Hist {
			if h.Inst == "y" && h.To == "cooling" {
				n++
			}
		}
		return n == 2
	})
	if rec := storedRecord(t, rd); rec.State != "eligible" || rec.Inst != "x" {
		t.Errorf("shared record %s by %s after y's second failure, want x's eligible", rec.State, rec.Inst)
	}
	if s := stateOf(trY); s != health.Cooling {
		t.Errorf("y after its second failure: %v, want cooling", s)
	}
	if s := stateOf(trX); s != health.Eligible {
		t.Errorf("x after y's second failure: %v, want eligible", s)
	}
	if n := strings.Count(logsY.String(), staleCredMsg); n != 1 {
		t.Errorf("y logged its stale credentials %d times, want once:\n%s", n, logsY)
	}
	if strings.Contains(logsY.String(), "secret") {
		t.Errorf("y's log shows a password:\n%s", logsY)
	}
}
