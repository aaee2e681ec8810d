package cluster

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// TestClusterOutageEnableWins: a disables k; during an outage b enables
// it and its probe passes locally; when Redis returns the newer operator
// action wins and k is eligible everywhere. Bug: only the probe's eligible
// stayed queued, with the old disable's stamp, so it lost; b applied the
// disable and the enable was lost fleet-wide.
func TestClusterOutageEnableWins(t *testing.T) {
	rd := clustertest.Start(t)
	cfg := Config{Resync: time.Second}
	a, trA := newMember(t, rd, "a", cfg)
	b, trB := newMember(t, rd, "b", cfg)
	_, trC := newMember(t, rd, "c", cfg)
	trA.Disable(trA.Lookup("k"), "disabled via admin API")
	for _, tr := range []*health.Tracker{trB, trC} {
		waitUntil(t, 3*time.Second, "the disable everywhere", func() bool { return stateOf(tr) == health.Disabled })
	}
	if got := rd.Do("SAVE"); got != "+OK" {
		t.Fatalf("SAVE: %s", got)
	}
	rd.Stop()
	waitUntil(t, 5*time.Second, "b notices the outage", func() bool { return !b.Connected() })
	waitUntil(t, 5*time.Second, "a notices the outage", func() bool { return !a.Connected() })

	trB.Enable(trB.Lookup("k"))
	// b's probe passes locally (the tracker has no prober here: the
	// transition it would publish).
	b.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now().Add(time.Millisecond)})

	rd.Start() // with the data saved above
	waitUntil(t, 5*time.Second, "the record eligible", func() bool { return storedRecord(t, rd).State == "eligible" })
	for name, tr := range map[string]*health.Tracker{"a": trA, "c": trC} {
		waitUntil(t, 5*time.Second, name+" eligible", func() bool { return stateOf(tr) == health.Eligible })
	}
	if s := stateOf(trB); s == health.Disabled {
		t.Errorf("b: %v, the enable was lost", s)
	}
	if rec := storedRecord(t, rd); !histHas(rec, "enabled by operator") {
		t.Errorf("shared history lacks b's enable: %+v", rec.Hist)
	}
}

// TestClusterOwnRecordAppliesWhenAstray: a record this instance wrote is
// applied when the local state differs from it (here: a probe_allowed
// reached through a remote transition that the store never kept). Bug:
// consider ignored every record carrying this process's token, so
// TryProbe's apply of the settled (disabled) record was a no-op and the
// instance stayed probe_allowed, retrying the lease for ever.
func TestClusterOwnRecordAppliesWhenAstray(t *testing.T) {
	rd := clustertest.Start(t)
	a, trA := newMember(t, rd, "a", Config{})
	trA.Disable(trA.Lookup("k"), "disabled via admin API")
	waitUntil(t, 3*time.Second, "a's disable stored", func() bool { return storedRecord(t, rd).State == "disabled" })
	// The local state goes astray without a write.
	trA.ApplyRemote("k", health.RemoteState{Key: "k", State: health.ProbeAllowed, Reason: health.Operator,
		Stage: health.StageOperator, At: time.Now()})
	if s := stateOf(trA); s != health.ProbeAllowed {
		t.Fatalf("setup: %v", s)
	}
	if _, ok := a.TryProbe("k"); ok {
		t.Fatal("a was told to probe a record disabled in the store")
	}
	if s := stateOf(trA); s != health.Disabled {
		t.Errorf("a after TryProbe: %v, want the stored disable", s)
	}
}

// TestClusterForcedReadDuringWriteStaysForced: TryProbe's forced apply of
// a settled record that arrives while this instance's write of the same
// upstream runs is applied once the write is noted, though the write made
// that version the one seen. Bug: the held record was considered unforced,
// dropped as already seen, and the instance stayed probe_allowed (CI flake
// of TestClusterOwnRecordAppliesWhenAstray).
func TestClusterForcedReadDuringWriteStaysForced(t *testing.T) {
	rd := clustertest.Start(t)
	trA := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	a, err := New(Config{Redis: rd.URL(), Instance: "a"}, trA, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	trA.SetFleet(a, a, a.RetryInterval())
	trA.Add("k", "up", nil, false)
	trA.Disable(trA.Lookup("k"), "disabled via admin API")
	a.mu.Lock()
	q := a.pending["k"]
	delete(a.pending, "k")
	a.writing["k"] = true // flush took the batch
	a.mu.Unlock()
	if len(q) != 1 {
		t.Fatalf("queued %+v", q)
	}
	if err := a.write(q[0]); err != nil {
		t.Fatal(err)
	}
	rec := storedRecord(t, rd)
	if rec.State != "disabled" {
		t.Fatalf("stored %s", rec.State)
	}
	// The local state goes astray, then TryProbe's read of the stored
	// disable arrives before the write's result is noted.
	trA.ApplyRemote("k", health.RemoteState{Key: "k", State: health.ProbeAllowed, Reason: health.Operator,
		Stage: health.StageOperator, At: time.Now()})
	a.consider(rec, true)
	if s := stateOf(trA); s != health.ProbeAllowed {
		t.Fatalf("applied while the write ran: %v", s)
	}
	a.unheld("k")
	if s := stateOf(trA); s != health.Disabled {
		t.Errorf("after the write: %v, want the stored disable", s)
	}
}

// TestClusterRecordReadDuringWriteWaits: a record read while this
// instance's write of the same upstream runs is considered only once the
// write's result is noted, so an older one (another instance's message,
// published just before this instance's write) is dropped by version.
// Bug: it was applied in that window (flush had emptied pending, and the
// version seen was raised only after the script returned): another
// instance's failure cooled a record just disabled here, or, as here, an
// older probe pass made it eligible while the store holds the cooling.
func TestClusterRecordReadDuringWriteWaits(t *testing.T) {
	rd := clustertest.Start(t)
	// Not started: no sync loop, this test runs the flush's steps itself.
	trA := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	a, err := New(Config{Redis: rd.URL(), Instance: "a"}, trA, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	trA.SetFleet(a, a, a.RetryInterval())
	trA.Add("k", "up", nil, false)
	other := record{Key: "k", V: 1, State: "eligible", From: "probe_allowed", Stage: "probe",
		Detail: "c's probe passed", At: ms(time.Now().Add(-time.Second)), Inst: "c", Tok: "c/1"}
	raw, _ := json.Marshal(other)
	rd.Do("SET", "rotor:rec:k", string(raw))

	r := trA.Lookup("k")
	for stateOf(trA) == health.Eligible {
		trA.Fail(r, &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("refused")})
	}
	a.mu.Lock()
	q := a.pending["k"]
	delete(a.pending, "k")
	a.writing["k"] = true // flush took the batch
	a.mu.Unlock()
	if len(q) != 1 {
		t.Fatalf("queued %+v", q)
	}
	// c's older message arrives while a's write runs.
	a.consider(other, false)
	if err := a.write(q[0]); err != nil {
		t.Fatal(err)
	}
	a.unheld("k")
	if s := stateOf(trA); s != health.Cooling {
		t.Errorf("a after its write: %v, want cooling (what the store holds)", s)
	}
	if rec := storedRecord(t, rd); rec.State != "cooling" {
		t.Errorf("stored %s", rec.State)
	}
}

// TestClusterMergedOwnRecordApplied: a record carrying this process's
// token but a newer version (another instance's put-back merged its
// history into this one's state) is applied. Bug: it was taken for this
// instance's own write, at every resync, and the history stayed short.
func TestClusterMergedOwnRecordApplied(t *testing.T) {
	rd := clustertest.Start(t)
	b, trB := newMember(t, rd, "b", Config{Resync: time.Second})
	if err := b.write(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rec := storedRecord(t, rd)
	rec.V++
	rec.Hist = append([]hist{{At: ms(time.Now().Add(-time.Minute)), From: "eligible", To: "cooling", Reason: "refused",
		Stage: "dial", Detail: "put back by a", Inst: "a"}}, rec.Hist...)
	raw, _ := json.Marshal(rec)
	rd.Do("SET", "rotor:rec:k", string(raw))
	waitUntil(t, 5*time.Second, "b lists the merged history", func() bool {
		return len(trB.Snapshot(trB.Lookup("k")).History) == 2
	})
}

// TestClusterOutageEnableOfEligibleWins is the tester's repro: during an
// outage b disables k and, a moment later, c, which sees k eligible,
// enables it; when Redis returns the newer operator action, c's enable,
// wins on every instance (with Redis's data or empty), and the shared
// history lists both. Bug: c's enable of an eligible record changed
// nothing and queued nothing, so b's disable won fleet-wide.
func TestClusterOutageEnableOfEligibleWins(t *testing.T) {
	for _, empty := range []bool{false, true} {
		t.Run(map[bool]string{false: "with its data", true: "empty"}[empty], func(t *testing.T) {
			rd := clustertest.Start(t)
			cfg := Config{Resync: time.Second}
			a, trA := newMember(t, rd, "a", cfg)
			b, trB := newMember(t, rd, "b", cfg)
			c, trC := newMember(t, rd, "c", cfg)
			probePassed(t, a)
			for _, tr := range []*health.Tracker{trB, trC} {
				waitUntil(t, 3*time.Second, "the shared eligible everywhere", func() bool {
					return len(tr.Snapshot(tr.Lookup("k")).History) == 1
				})
			}
			if !empty {
				if got := rd.Do("SAVE"); got != "+OK" {
					t.Fatalf("SAVE: %s", got)
				}
			}
			rd.Stop()
			for _, m := range []*Cluster{a, b, c} {
				waitUntil(t, 5*time.Second, m.Instance()+" notices the outage", func() bool { return !m.Connected() })
			}
			trB.Disable(trB.Lookup("k"), "disabled via admin API")
			time.Sleep(5 * time.Millisecond) // a later millisecond stamp
			trC.Enable(trC.Lookup("k"))
			if s := stateOf(trC); s != health.Eligible {
				t.Fatalf("c after its enable: %v, want eligible (unchanged)", s)
			}

			rd.Start()
			trackers := map[string]*health.Tracker{"a": trA, "b": trB, "c": trC}
			waitUntil(t, 10*time.Second, "the enable and the disable in redis", func() bool {
				rec := storedRecord(t, rd)
				return histHas(rec, "enabled by operator") && histHas(rec, "disabled via admin API")
			})
			for name, tr := range trackers {
				waitUntil(t, 10*time.Second, name+" applies the enable", func() bool {
					s := tr.Snapshot(tr.Lookup("k"))
					return s.State != health.Disabled && len(s.History) == len(storedRecord(t, rd).Hist)
				})
			}
			// A resync later, nothing went back to the disable.
			time.Sleep(1500 * time.Millisecond)
			if rec := storedRecord(t, rd); rec.State == "disabled" {
				t.Errorf("redis holds %s by %s, want c's enable to have won", rec.State, rec.Inst)
			}
			for name, tr := range trackers {
				if s := stateOf(tr); s == health.Disabled {
					t.Errorf("%s: %v, want the enable to have won", name, s)
				}
			}
		})
	}
}
