package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// newCredMember is newMember with the upstream k's password pw and its log
// captured.
func newCredMember(t *testing.T, rd *clustertest.Redis, inst, pw string) (*Cluster, *health.Tracker, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	c, err := New(Config{Redis: rd.URL(), Instance: inst}, tr, zerolog.New(logs))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.SetCredentials(map[string]string{"k": pw})
	tr.SetFleet(c, c, c.RetryInterval())
	tr.Add("k", "up", nil, false)
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	waitUntil(t, 5*time.Second, inst+" connected", c.Connected)
	return c, tr, logs
}

// authRejected is a proxy_auth failure at time at.
func authRejected(at time.Time) health.RemoteState {
	return health.RemoteState{Key: "k", State: health.Cooling, From: health.Eligible, Reason: health.AuthRejected,
		Stage: health.StageProxyAuth, Detail: "proxy rejected the credentials", At: at, Until: at.Add(time.Minute), Streak: 1}
}

// TestClusterAuthRejectedStaysWithItsCredentials: an instance with a stale
// upstream password (y) has its auth_rejected failures shared, but only
// the instances with the same password (z) take them; x, with another
// password, keeps serving through the upstream and logs once that the
// instances disagree. Bug: the password is not in the identity, so y's
// failure cooled the upstream on the whole fleet.
func TestClusterAuthRejectedStaysWithItsCredentials(t *testing.T) {
	rd := clustertest.Start(t)
	_, trX, logsX := newCredMember(t, rd, "x", "new-secret")
	y, trY, _ := newCredMember(t, rd, "y", "old-secret")
	_, trZ, _ := newCredMember(t, rd, "z", "old-secret")
	waitSubscribed(t, rd, 3)

	y.Publish(authRejected(time.Now()))
	waitUntil(t, 3*time.Second, "z takes y's failure", func() bool { return stateOf(trZ) == health.Cooling })
	waitUntil(t, 3*time.Second, "x lists y's failure", func() bool {
		for _, tr := range trX.Snapshot(trX.Lookup("k")).History {
			if strings.HasPrefix(tr.Detail, "proxy rejected the credentials") {
				return true
			}
		}
		return false
	})
	if s := stateOf(trX); s != health.Eligible {
		t.Errorf("x (other password): %v, want eligible", s)
	}
	_ = trY
	rec := storedRecord(t, rd)
	key := []byte(rd.Do("GET", "rotor:credkey"))
	if len(rec.Cred) != 16 || strings.Contains(rd.Do("GET", "rotor:rec:k"), "secret") || rec.Cred == fingerprint(key, "k", "new-secret") {
		t.Errorf("stored credential fingerprint %q", rec.Cred)
	}
	if rec.Cred != fingerprint(key, "k", "old-secret") {
		t.Errorf("stored fingerprint %q is not y's", rec.Cred)
	}

	// A second failure of y: x still serves and does not log again.
	time.Sleep(5 * time.Millisecond)
	y.Publish(authRejected(time.Now()))
	waitUntil(t, 3*time.Second, "the second failure stored", func() bool { return len(storedRecord(t, rd).Hist) >= 2 })
	time.Sleep(100 * time.Millisecond) // the message's delivery to x (no event to wait on)
	if s := stateOf(trX); s != health.Eligible {
		t.Errorf("x after y's second failure: %v", s)
	}
	if n := strings.Count(logsX.String(), credMsg); n != 1 {
		t.Errorf("x logged the disagreement %d times, want once:\n%s", n, logsX)
	}
	if strings.Contains(logsX.String(), "secret") {
		t.Errorf("x's log shows a password:\n%s", logsX)
	}

	// The same class from an instance with x's password applies on x.
	time.Sleep(5 * time.Millisecond)
	w, _, _ := newCredMember(t, rd, "w", "new-secret")
	waitSubscribed(t, rd, 4)
	w.Publish(authRejected(time.Now()))
	waitUntil(t, 3*time.Second, "x takes w's failure", func() bool { return stateOf(trX) == health.Cooling })
}
