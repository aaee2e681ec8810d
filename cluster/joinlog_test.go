package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// TestClusterFirstConnectSaysJoining: an instance started while Redis was
// down says, at its first connection, that it joins the fleet view (bug:
// "redis reachable again: reconciling", as after an outage of an
// instance that had been connected); after a real outage it says "again".
func TestClusterFirstConnectSaysJoining(t *testing.T) {
	rd := clustertest.Start(t)
	rd.Stop()
	logs := &syncBuf{}
	tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	c, err := New(Config{Redis: rd.URL(), Instance: "a"}, tr, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	tr.SetFleet(c, c, c.RetryInterval())
	tr.Add("k", "up", nil, false)
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	rd.Start()
	waitUntil(t, 5*time.Second, "connected", c.Connected)
	waitUntil(t, 3*time.Second, "the joining line", func() bool { return strings.Contains(logs.String(), "redis reachable: joining the fleet view") })
	if strings.Contains(logs.String(), "reachable again") {
		t.Errorf("first connection logged as a return:\n%s", logs)
	}
	rd.Stop()
	waitUntil(t, 5*time.Second, "the outage", func() bool { return !c.Connected() })
	rd.Start()
	waitUntil(t, 5*time.Second, "the return line", func() bool {
		return strings.Contains(logs.String(), "redis reachable again: reconciling the fleet view")
	})
	if n := strings.Count(logs.String(), "joining the fleet view"); n != 1 {
		t.Errorf("%d joining lines, want 1:\n%s", n, logs)
	}
}

// TestClusterAdoptedRecordLoggedAsSuch: a fresh instance (its records
// start probe_allowed) that takes an eligible record from the fleet logs
// it as adopted from the fleet, with the instance that probed (bug:
// "upstream state changed probe_allowed→eligible stage=probe", as if it
// had probed itself).
func TestClusterAdoptedRecordLoggedAsSuch(t *testing.T) {
	rd := clustertest.Start(t)
	a, _ := newMember(t, rd, "a", Config{})
	a.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now()})
	waitUntil(t, 3*time.Second, "a's probe stored", func() bool { return storedRecord(t, rd).State == "eligible" })

	logs := &syncBuf{}
	tr := health.NewTracker(health.Config{}, nil, zerolog.New(logs))
	b, err := New(Config{Redis: rd.URL(), Instance: "b"}, tr, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tr.SetFleet(b, b, b.RetryInterval())
	tr.Add("k", "up", nil, false)
	if s := stateOf(tr); s != health.ProbeAllowed {
		t.Fatalf("setup: fresh record %v", s)
	}
	b.Start()
	t.Cleanup(func() { _ = b.Close() })
	waitUntil(t, 3*time.Second, "b eligible", func() bool { return stateOf(tr) == health.Eligible })
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"to":"eligible"`) {
			line = l
		}
	}
	if !strings.Contains(line, "adopted from the fleet") || !strings.Contains(line, "instance a") {
		t.Errorf("b's line for the record it took: %s\nall:\n%s", line, logs)
	}
}
