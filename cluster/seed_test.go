package cluster

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// storedRecord decodes the shared record of "k".
func storedRecord(t *testing.T, rd *clustertest.Redis) record {
	t.Helper()
	raw := rd.Do("GET", "rotor:rec:k")
	if raw == "" {
		return record{}
	}
	rec, err := decodeRecord(raw)
	if err != nil {
		t.Fatalf("stored record %q: %v", raw, err)
	}
	return rec
}

func histHas(rec record, detail string) bool {
	for _, h := range rec.Hist {
		if strings.Contains(h.Detail, detail) {
			return true
		}
	}
	return false
}

func stateOf(tr *health.Tracker) health.State { return tr.Snapshot(tr.Lookup("k")).State }

// TestClusterEmptyRedisRestartKeepsRecords is the tester's variant A: Redis
// restarts empty; the instances that know the operator's disable put it
// back, with its history, and a fresh instance that probes afterwards
// does not end it. A record deleted alone is put back too.
func TestClusterEmptyRedisRestartKeepsRecords(t *testing.T) {
	rd := clustertest.Start(t)
	cfg := Config{Resync: time.Second}
	a, trA := newMember(t, rd, "a", cfg)
	b, trB := newMember(t, rd, "b", cfg)
	// Some history first: a probe passed on b.
	probePassed(t, b)
	disableSeen(t, trA, trB)

	rd.Stop()
	rd.Start() // empty
	waitUntil(t, 5*time.Second, "the disable back in redis", func() bool {
		rec := storedRecord(t, rd)
		return rec.State == "disabled" && rec.Stage == "operator"
	})
	rec := storedRecord(t, rd)
	if rec.Inst != "a" || !strings.HasPrefix(rec.Detail, "disabled via admin API") {
		t.Errorf("record put back as %s by %s (%q), want a's disable", rec.State, rec.Inst, rec.Detail)
	}
	if !histHas(rec, "probe passed") || !histHas(rec, "disabled via admin API") {
		t.Errorf("history put back: %+v", rec.Hist)
	}
	for _, h := range rec.Hist {
		if strings.Contains(h.Detail, "(instance") {
			t.Errorf("history entry %q names its instance twice (inst %q)", h.Detail, h.Inst)
		}
	}

	// A fresh instance probes k and the probe passes: the disable holds.
	c, trC := newOfflineMember(t, rd, "c")
	waitUntil(t, 5*time.Second, "c connected", c.Connected)
	waitUntil(t, 5*time.Second, "c applies the disable", func() bool { return stateOf(trC) == health.Disabled })
	if err := c.write(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed on c", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if rec := storedRecord(t, rd); rec.State != "disabled" {
		t.Errorf("after c's probe: %s", rec.State)
	}
	if got := stateOf(trC); got != health.Disabled {
		t.Errorf("c: %v, want disabled", got)
	}
	for name, tr := range map[string]*health.Tracker{"a": trA, "b": trB} {
		if got := stateOf(tr); got != health.Disabled {
			t.Errorf("%s: %v, want disabled", name, got)
		}
		if h := tr.Snapshot(tr.Lookup("k")).History; len(h) < 2 {
			t.Errorf("%s: history %+v, want the probe and the disable", name, h)
		}
	}

	// One record lost alone (no restart): the next resync puts it back.
	rd.Do("DEL", "rotor:rec:k")
	waitUntil(t, 5*time.Second, "the deleted record back", func() bool { return storedRecord(t, rd).State == "disabled" })
	_ = a
}

// TestClusterOlderSnapshotKeepsDisable: Redis restarts from a snapshot
// older than the disable (same generation, lower versions). The instances
// notice the version went back and put the disable back.
func TestClusterOlderSnapshotKeepsDisable(t *testing.T) {
	rd := clustertest.Start(t)
	cfg := Config{Resync: time.Second}
	a, trA := newMember(t, rd, "a", cfg)
	_, trB := newMember(t, rd, "b", cfg)
	probePassed(t, a)
	if got := rd.Do("SAVE"); got != "+OK" {
		t.Fatalf("SAVE: %s", got)
	}
	disableSeen(t, trA, trB)
	rd.Stop()
	rd.Start() // the snapshot from before the disable
	if rec := storedRecord(t, rd); rec.State != "eligible" {
		t.Fatalf("restored snapshot holds %s, want the older eligible", rec.State)
	}
	waitUntil(t, 5*time.Second, "the disable back in redis", func() bool { return storedRecord(t, rd).State == "disabled" })
	for name, tr := range map[string]*health.Tracker{"a": trA, "b": trB} {
		if got := stateOf(tr); got != health.Disabled {
			t.Errorf("%s: %v, want disabled", name, got)
		}
	}
}

// TestClusterSeed pins seedScript's rules against a record another
// instance wrote first into an empty Redis.
func TestClusterSeed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stored    *health.RemoteState // written first, by "c"
		local     func(tr *health.Tracker, r *health.Record)
		wantState string
		wantInst  string
		wantWrite bool // the seed changed the record
		dropped   bool // the stored entry never took effect: not history
	}{
		{
			name:      "missing record is stored",
			local:     func(tr *health.Tracker, r *health.Record) { tr.Disable(r, "maintenance") },
			wantState: "disabled", wantInst: "a", wantWrite: true,
		},
		{
			name:   "a disable beats a newer probe pass written first",
			stored: &health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed, Stage: health.StageProbe, Detail: "probe passed", At: time.Now().Add(time.Minute)},
			local:  func(tr *health.Tracker, r *health.Record) { tr.Disable(r, "maintenance") },
			// The probe pass never took effect: an operator's disable held.
			wantState: "disabled", wantInst: "a", wantWrite: true, dropped: true,
		},
		{
			name:   "an older automatic state does not win",
			stored: &health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed, Stage: health.StageProbe, Detail: "probe passed", At: time.Now().Add(time.Minute)},
			local: func(tr *health.Tracker, r *health.Record) {
				tr.Fail(r, &health.Failure{Class: health.Refused, Stage: health.StageDial})
			},
			wantState: "eligible", wantInst: "c", wantWrite: true, // its history entry is added
		},
		{
			name:      "a newer operator enable is not undone by an older disable",
			stored:    &health.RemoteState{Key: "k", State: health.ProbeAllowed, From: health.Disabled, Reason: health.Operator, Stage: health.StageOperator, Detail: "enabled by operator", At: time.Now().Add(time.Minute)},
			local:     func(tr *health.Tracker, r *health.Record) { tr.Disable(r, "maintenance") },
			wantState: "probe_allowed", wantInst: "c", wantWrite: true,
		},
		{
			name:      "a fresh record puts nothing back",
			local:     func(tr *health.Tracker, r *health.Record) {},
			wantState: "", wantWrite: false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := clustertest.Start(t)
			tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
			a, err := New(Config{Redis: rd.URL(), Instance: "a"}, tr, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			// Not started: a's transitions stay queued, seed runs alone.
			t.Cleanup(func() { _ = a.Close() })
			tr.SetFleet(a, nil, time.Second)
			r := tr.Add("k", "up", nil, false)
			tc.local(tr, r)
			c, _ := newMember(t, rd, "c", Config{})
			if tc.stored != nil {
				if err := c.write(*tc.stored); err != nil {
					t.Fatal(err)
				}
			}
			before := storedRecord(t, rd)
			if err := a.seed([]seedItem{{key: "k"}}); err != nil {
				t.Fatal(err)
			}
			rec := storedRecord(t, rd)
			if rec.State != tc.wantState || rec.Inst != tc.wantInst {
				t.Errorf("record %s by %s, want %s by %s", rec.State, rec.Inst, tc.wantState, tc.wantInst)
			}
			if wrote := rec.V != before.V; wrote != tc.wantWrite {
				t.Errorf("seed wrote %v (v %d → %d), want %v", wrote, before.V, rec.V, tc.wantWrite)
			}
			if tc.stored != nil && histHas(rec, tc.stored.Detail) == tc.dropped {
				t.Errorf("history %+v: the stored entry listed %v, want %v", rec.Hist, !tc.dropped, !tc.dropped)
			}
			// Seeding again changes nothing.
			again := rec.V
			if err := a.seed([]seedItem{{key: "k"}}); err != nil {
				t.Fatal(err)
			}
			if rec := storedRecord(t, rd); rec.V != again {
				raw, _ := json.Marshal(rec)
				t.Errorf("a second seed wrote again: %s", raw)
			}
		})
	}
}

// TestClusterSecondEmptyRestartKeepsDisable is a tester's scenario: while
// Redis was down a fresh instance probed the disabled upstream, and its
// eligible reached the empty Redis first. The put-back disable must win
// without listing that probe after it, so that a second empty restart
// puts the disable back again. Issue: the merged history ended with the
// probe, the instances' last shared entry was not their state, nothing
// was put back, and the next fresh instance's probe re-enabled the
// upstream fleet-wide.
func TestClusterSecondEmptyRestartKeepsDisable(t *testing.T) {
	rd := clustertest.Start(t)
	cfg := Config{Resync: time.Second}
	a, trA := newMember(t, rd, "a", cfg)
	_, trB := newMember(t, rd, "b", cfg)
	probePassed(t, a)
	disableSeen(t, trA, trB)

	// Down; a fresh instance's probe passes meanwhile and is the first
	// thing the empty Redis holds.
	rd.Stop()
	rd.Start()
	probe := record{Key: "k", V: 1, State: "eligible", From: "probe_allowed", Stage: "probe", Detail: "probe passed",
		At: ms(time.Now()), Inst: "d", Hist: []hist{{At: ms(time.Now()), From: "probe_allowed", To: "eligible", Stage: "probe", Detail: "probe passed", Inst: "d"}}}
	raw, _ := json.Marshal(probe)
	rd.Do("SET", "rotor:rec:k", string(raw))
	waitUntil(t, 5*time.Second, "the disable put back over the probe", func() bool {
		rec := storedRecord(t, rd)
		return rec.State == "disabled" && rec.Stage == "operator"
	})
	rec := storedRecord(t, rd)
	for _, h := range rec.Hist {
		if h.Inst == "d" {
			t.Errorf("history lists d's probe after the disable: %+v", rec.Hist)
		}
	}
	// Give the instances a resync to apply what the store holds.
	time.Sleep(1500 * time.Millisecond)

	rd.Stop()
	rd.Start() // empty again
	waitUntil(t, 5*time.Second, "the disable back after the second empty restart", func() bool {
		rec := storedRecord(t, rd)
		return rec.State == "disabled" && rec.Stage == "operator"
	})
	for name, tr := range map[string]*health.Tracker{"a": trA, "b": trB} {
		if got := stateOf(tr); got != health.Disabled {
			t.Errorf("%s: %v, want disabled", name, got)
		}
	}
}

// probePassed writes, through c, a probe that passed a second ago: some
// shared history for k before the test's own steps.
func probePassed(t *testing.T, c *Cluster) {
	t.Helper()
	if err := c.write(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now().Add(-time.Second)}); err != nil {
		t.Fatal(err)
	}
}

// disableSeen disables k on from as an operator does and waits until
// other has applied it.
func disableSeen(t *testing.T, from, other *health.Tracker) {
	t.Helper()
	from.Disable(from.Lookup("k"), "disabled via admin API")
	waitUntil(t, 3*time.Second, "the disable seen by the other instance", func() bool { return stateOf(other) == health.Disabled })
}

// TestSeedRecordStampsEnableEntry: an operator's enable that changed no
// state (eligible to eligible) in the history being put back is the
// newest operator action the seed knows, even when this process never
// published it (a restart with a state file): an older disable elsewhere
// must not win over it.
func TestSeedRecordStampsEnableEntry(t *testing.T) {
	at := time.UnixMilli(time.Now().UnixMilli())
	rs := health.RemoteState{Key: "k", State: health.Eligible, From: health.Eligible, Reason: health.Operator,
		Stage: health.StageOperator, Detail: "enabled by operator", At: at,
		History: []health.Transition{{At: at, From: health.Eligible, To: health.Eligible, Reason: health.Operator,
			Stage: health.StageOperator, Detail: "enabled by operator"}}}
	r := seedRecord(rs, "c", "c/1", stamp{})
	if r.OpAt != at.UnixMilli() || r.OpInst != "c" {
		t.Errorf("seed stamped %d by %q, want the enable's %d by c", r.OpAt, r.OpInst, at.UnixMilli())
	}
}
