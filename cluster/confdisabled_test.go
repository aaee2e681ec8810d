package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// TestClusterConfigDisabledMergesHistory: an instance whose config
// disables k keeps it disabled whatever the fleet does, but lists the
// fleet's transitions of k as every other instance does. Bug: ApplyRemote
// returned before the history for a config-disabled record, so its
// /api/upstreams history fell behind the shared one.
func TestClusterConfigDisabledMergesHistory(t *testing.T) {
	rd := clustertest.Start(t)
	trA := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	a, err := New(Config{Redis: rd.URL(), Instance: "a"}, trA, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	trA.SetFleet(a, a, a.RetryInterval())
	trA.Add("k", "up", nil, true) // disabled = true in a's config
	a.Start()
	t.Cleanup(func() { _ = a.Close() })
	waitUntil(t, 5*time.Second, "a connected", a.Connected)

	// b's probe of k passes, then a tunnel through it fails.
	b, _ := newMember(t, rd, "b", Config{})
	waitSubscribed(t, rd, 2)
	b.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now()})
	time.Sleep(5 * time.Millisecond)
	now := time.Now()
	b.Publish(health.RemoteState{Key: "k", State: health.Cooling, From: health.Eligible, Reason: health.Refused,
		Stage: health.StageDial, Detail: "connection refused", At: now, Until: now.Add(time.Minute), Streak: 1})
	waitUntil(t, 3*time.Second, "the cooling stored", func() bool { return storedRecord(t, rd).State == "cooling" })

	want := strings.Join(storedDetails(storedRecord(t, rd)), ",")
	waitDetails(t, "a", func() []string { return details(trA.Snapshot(trA.Lookup("k")).History) }, strings.Split(want, ","))
	if s := stateOf(trA); s != health.Disabled {
		t.Errorf("a: %v, want disabled (its config)", s)
	}
}
