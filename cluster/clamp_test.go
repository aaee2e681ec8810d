package cluster

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// newClampMember is newMember with a refused max cooldown of max and a
// clock-skew tolerance of skew.
func newClampMember(t *testing.T, rd *clustertest.Redis, inst string, max, skew time.Duration) (*Cluster, *health.Tracker) {
	t.Helper()
	hc := health.Config{StartEligible: true}
	hc.Cooldown.Refused = health.ClassPolicy{Base: max / 2, Max: max}
	tr := health.NewTracker(hc, nil, zerolog.Nop())
	c, err := New(Config{Redis: rd.URL(), Instance: inst, MaxClockSkew: skew}, tr, zerolog.Nop())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tr.SetFleet(c, c, c.RetryInterval())
	tr.Add("k", "up", nil, false)
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	waitUntil(t, 5*time.Second, inst+" connected", c.Connected)
	return c, tr
}

// TestClusterClampedCoolingEndsThenProbes is the tester's repro: a peer
// with a clock 10 h ahead stores a cooling until now+10h. Every instance
// clamps it to the class's max plus the skew, and once that clamped
// deadline has passed the instance that wins the lease probes. Bug:
// TryProbe judged the stored record by its raw until (still 10 h ahead),
// dropped the lease and re-applied the record, which the clamp cooled for
// another max+skew from then: cooling → probe_allowed → cooling, with no
// probe, until the peer's own deadline.
func TestClusterClampedCoolingEndsThenProbes(t *testing.T) {
	rd := clustertest.Start(t)
	const max, skew = time.Second, 500 * time.Millisecond
	a, trA := newClampMember(t, rd, "a", max, skew)

	now := time.Now()
	peer := record{Key: "k", V: 1, State: "cooling", From: "eligible", Reason: "refused", Stage: "dial",
		Detail: "refused", Until: ms(now.Add(10 * time.Hour)), Streak: 1, At: ms(now), Inst: "z", Tok: "z/1",
		Hist: []hist{{At: ms(now), From: "eligible", To: "cooling", Reason: "refused", Stage: "dial", Detail: "refused", Inst: "z"}}}
	raw, _ := json.Marshal(peer)
	rd.Do("SET", "rotor:rec:k", string(raw))
	rd.Do("PUBLISH", "rotor:events", string(raw))

	waitUntil(t, 5*time.Second, "a applies the peer's cooling", func() bool { return stateOf(trA) == health.Cooling })
	until := trA.Snapshot(trA.Lookup("k")).Until
	if limit := now.Add(max + skew + time.Second); until.After(limit) {
		t.Fatalf("cooling until %v, want clamped to at most %v", until, limit)
	}
	waitUntil(t, 10*time.Second, "the clamped cooldown to run out", func() bool { return stateOf(trA) == health.ProbeAllowed })

	release, ok := a.TryProbe("k")
	if !ok {
		t.Fatalf("TryProbe after the clamped deadline refused (state now %v, until %v): no probe would run",
			stateOf(trA), trA.Snapshot(trA.Lookup("k")).Until)
	}
	if s := stateOf(trA); s != health.ProbeAllowed {
		t.Errorf("after TryProbe: %v, want probe_allowed (the probe runs)", s)
	}
	// The probe passes: its eligible is newer than the peer's cooling.
	a.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now()})
	release()
	waitUntil(t, 5*time.Second, "the probe's eligible stored", func() bool { return storedRecord(t, rd).State == "eligible" })

	// A later reading of the same stored cooling (a resync, a write's
	// answer) does not restart the clamp either: a second instance that
	// applies it now finds it over at once.
	rd.Do("SET", "rotor:rec:k", string(raw))
	_, trB := newClampMember(t, rd, "b", max, skew)
	waitUntil(t, 5*time.Second, "b applies the stored cooling", func() bool {
		s := trB.Snapshot(trB.Lookup("k"))
		return s.State == health.ProbeAllowed || s.State == health.Cooling
	})
	if s := trB.Snapshot(trB.Lookup("k")); s.State != health.ProbeAllowed {
		t.Errorf("b: %v until %v, want probe_allowed: the cooling's clamped end (%v) is past", s.State, s.Until, now.Add(max+skew))
	}
}

// TestClusterWriteTimeBoundedByRedisClock: a peer whose clock is an hour
// ahead writes a cooling; another instance's probe passes a moment later,
// by the real clock. Bug: the cooling's time (an hour ahead) won the
// ordering, so the probe's eligible lost and the fleet kept the upstream
// out until the fast clock's time came. A write's time more than
// max_clock_skew ahead of Redis's clock is stored as Redis's.
func TestClusterWriteTimeBoundedByRedisClock(t *testing.T) {
	rd := clustertest.Start(t)
	const max, skew = time.Minute, 500 * time.Millisecond
	fast, _ := newClampMember(t, rd, "fast", max, skew)
	b, _ := newClampMember(t, rd, "b", max, skew)

	ahead := time.Now().Add(time.Hour)
	fast.Publish(health.RemoteState{Key: "k", State: health.Cooling, From: health.Eligible, Reason: health.Refused,
		Stage: health.StageDial, Detail: "refused", At: ahead, Until: ahead.Add(30 * time.Second), Streak: 1})
	// Redis is read, not b: b may see the write only at its next resync.
	waitUntil(t, 10*time.Second, "the fast peer's cooling stored", func() bool { return storedRecord(t, rd).State == "cooling" })
	if at := fromMS(storedRecord(t, rd).At); at.After(time.Now().Add(skew)) {
		t.Errorf("stored time %v is ahead of Redis's clock by more than the skew", at)
	}

	b.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now().Add(10 * time.Millisecond)})
	waitUntil(t, 5*time.Second, "the probe's eligible stored", func() bool { return storedRecord(t, rd).State == "eligible" })

	// A clock ahead by less than the skew is kept as written.
	near := time.Now().Add(skew / 2).Round(time.Millisecond)
	fast.Publish(health.RemoteState{Key: "k", State: health.Cooling, From: health.Eligible, Reason: health.Refused,
		Stage: health.StageDial, Detail: "refused again", At: near, Until: near.Add(30 * time.Second), Streak: 1})
	waitUntil(t, 5*time.Second, "the second cooling stored", func() bool { return storedRecord(t, rd).State == "cooling" })
	if at := fromMS(storedRecord(t, rd).At); !at.Equal(near) {
		t.Errorf("stored time %v, want %v as written (within the skew)", at, near)
	}
}

// TestClusterOperatorTimeNotBounded: an operator action from a peer whose
// clock is ahead keeps its time, so its history entry sorts where its
// stamp orders it and the history's last entry is the state. Bug: its
// time was bounded to Redis's and its stamp not, so a fast peer's disable
// that won over a later enable was listed before that enable; the last
// entry said "enabled" while the record was disabled, and no instance put
// the record back after an empty Redis restart.
func TestClusterOperatorTimeNotBounded(t *testing.T) {
	rd := clustertest.Start(t)
	const max, skew = time.Minute, 500 * time.Millisecond
	fast, _ := newClampMember(t, rd, "fast", max, skew)
	b, _ := newClampMember(t, rd, "b", max, skew)

	ahead := time.Now().Add(time.Hour)
	fast.Publish(health.RemoteState{Key: "k", State: health.Disabled, From: health.Eligible, Reason: health.Operator,
		Stage: health.StageOperator, Detail: "disabled via admin API", At: ahead, OpAt: ahead})
	waitUntil(t, 10*time.Second, "the fast peer's disable stored", func() bool { return storedRecord(t, rd).State == "disabled" })

	b.Publish(health.RemoteState{Key: "k", State: health.ProbeAllowed, From: health.Disabled, Reason: health.Operator,
		Stage: health.StageOperator, Detail: "enabled by operator", At: time.Now(), OpAt: time.Now()})
	waitUntil(t, 5*time.Second, "b's enable written (and lost)", func() bool { return len(storedRecord(t, rd).Hist) >= 2 })
	rec := storedRecord(t, rd)
	if rec.State != "disabled" {
		t.Fatalf("stored %s, want the fast peer's newer disable", rec.State)
	}
	if last := rec.Hist[len(rec.Hist)-1]; last.To != rec.State {
		t.Errorf("history ends with %s → %s (%s), but the record is %s", last.From, last.To, last.Detail, rec.State)
	}
}
