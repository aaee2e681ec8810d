package health

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

// fakeFleet is a FleetHook and ProbeGate for fleet-mode tests.
type fakeFleet struct {
	mu        sync.Mutex
	published []RemoteState
	grant     bool // TryProbe answer
	asked     int
	released  int
}

func (f *fakeFleet) Publish(rs RemoteState) {
	f.mu.Lock()
	f.published = append(f.published, rs)
	f.mu.Unlock()
}

func (f *fakeFleet) TryProbe(key string) (func(), bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	if !f.grant {
		return nil, false
	}
	return func() {
		f.mu.Lock()
		f.released++
		f.mu.Unlock()
	}, true
}

func (f *fakeFleet) snapshot() (pub []RemoteState, asked, released int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]RemoteState(nil), f.published...), f.asked, f.released
}

func TestFleetPublishesSubstantiveTransitionsOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.StartEligible = true
		tr := NewTracker(cfg, nil, zerolog.Nop())
		ff := &fakeFleet{grant: true}
		tr.SetFleet(ff, ff, time.Second)
		up := &pipeUpstream{}
		r := tr.Add("k", "up", up, false)
		startRun(t, tr)

		tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
		time.Sleep(31 * time.Second) // refused base 30s: cooled, then probed and passed
		synctest.Wait()
		pub, asked, released := ff.snapshot()
		var got []State
		for _, p := range pub {
			got = append(got, p.State)
			if p.Key != "k" {
				t.Errorf("published key %q", p.Key)
			}
		}
		// cooling → probe_allowed (cooldown ran out) is local-only.
		if len(got) != 2 || got[0] != Cooling || got[1] != Eligible {
			t.Fatalf("published %v, want [cooling eligible]", got)
		}
		if pub[0].Until.IsZero() || pub[0].Until != pub[0].Until.Round(0) {
			t.Errorf("cooling Until %v: want a wall-clock time without monotonic reading", pub[0].Until)
		}
		if pub[0].Reason != Refused || pub[0].Stage != StageDial || pub[0].Streak != 1 {
			t.Errorf("cooling record %+v", pub[0])
		}
		if asked != 1 || released != 1 || up.requests.Load() != 1 {
			t.Errorf("gate asked %d, released %d, probes %d; want 1, 1, 1", asked, released, up.requests.Load())
		}
	})
}

func TestFleetApplyRemoteCoolsWithoutEcho(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.StartEligible = true
		tr := NewTracker(cfg, nil, zerolog.Nop())
		ff := &fakeFleet{grant: false} // another instance owns every probe
		tr.SetFleet(ff, ff, 2*time.Second)
		up := &pipeUpstream{}
		r := tr.Add("k", "up", up, false)
		startRun(t, tr)

		until := time.Now().Add(10 * time.Second)
		if !tr.ApplyRemote("k", RemoteState{Key: "k", State: Cooling, From: Eligible, Reason: Timeout,
			Stage: StageTargetConnect, Detail: "boom", Until: until, Streak: 3, Instance: "b"}) {
			t.Fatal("ApplyRemote: no record")
		}
		if tr.Admit(r) {
			t.Fatal("admitted right after a remote cooling")
		}
		s := tr.Snapshot(r)
		if s.State != Cooling || s.Reason != Timeout || s.Stage != StageTargetConnect || s.Streak != 3 || !s.Until.Equal(until) {
			t.Fatalf("snapshot after remote cooling %+v", s)
		}
		if h := s.History; len(h) != 1 || h[0].Detail != "boom (instance b)" {
			t.Fatalf("history %+v", h)
		}
		// Applying the same record again changes nothing.
		tr.ApplyRemote("k", RemoteState{Key: "k", State: Cooling, Reason: Timeout, Until: until, Streak: 3})
		if n := len(tr.Snapshot(r).History); n != 1 {
			t.Errorf("idempotent apply added history: %d entries", n)
		}

		// The cooldown runs out: the gate is asked, says no, and is asked
		// again every retry interval; nothing probes and nothing publishes.
		time.Sleep(10*time.Second + 5*time.Second)
		synctest.Wait()
		pub, asked, _ := ff.snapshot()
		if len(pub) != 0 {
			t.Errorf("remote transitions echoed: %+v", pub)
		}
		if asked < 2 || up.requests.Load() != 0 {
			t.Errorf("gate asked %d times, probes %d; want >= 2 and 0", asked, up.requests.Load())
		}
		// The owner's probe passed: re-admitted here, without a probe.
		tr.ApplyRemote("k", RemoteState{Key: "k", State: Eligible, From: ProbeAllowed, Stage: StageProbe, Detail: "probe passed", Instance: "b"})
		if !tr.Eligible(r) {
			t.Fatalf("not eligible after a remote pass: %v", tr.Snapshot(r).State)
		}
		if s := tr.Snapshot(r); s.Streak != 0 || s.Reason != Timeout {
			t.Errorf("after remote pass: streak %d reason %v, want 0 and the last failure kept", s.Streak, s.Reason)
		}
		_, asked2, _ := ff.snapshot()
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, asked3, _ := ff.snapshot(); asked3 != asked2 {
			t.Errorf("gate asked %d more times after the record became eligible", asked3-asked2)
		}
		if pub, _, _ := ff.snapshot(); len(pub) != 0 {
			t.Errorf("remote eligible echoed: %+v", pub)
		}
	})
}

func TestFleetApplyRemoteStates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.StartEligible = true
		cfg.HistoryLen = 3
		tr := NewTracker(cfg, nil, zerolog.Nop())
		ff := &fakeFleet{}
		tr.SetFleet(ff, ff, time.Second)
		r := tr.Add("k", "up", &pipeUpstream{}, false)
		if tr.ApplyRemote("missing", RemoteState{State: Disabled}) {
			t.Error("ApplyRemote on an unknown key reported true")
		}
		tr.ApplyRemote("k", RemoteState{Key: "k", State: Disabled, Reason: Operator, Stage: StageOperator, Detail: "maintenance"})
		if s := tr.Snapshot(r); s.State != Disabled || s.Reason != Operator {
			t.Fatalf("remote disable: %+v", s)
		}
		// A cooling whose Until already passed here reads probe_allowed
		// (its record knows an operator action newer than the disable).
		tr.ApplyRemote("k", RemoteState{Key: "k", State: Cooling, Reason: Refused, Until: time.Now().Add(-time.Second), OpAt: time.Now()})
		if s := tr.Snapshot(r); s.State != ProbeAllowed {
			t.Fatalf("expired remote cooling: %v, want probe_allowed", s.State)
		}
		// A shared history replaces the local one, bounded.
		var h []Transition
		for i := range 5 {
			h = append(h, Transition{At: time.Unix(int64(i), 0), From: Eligible, To: Cooling})
		}
		tr.ApplyRemote("k", RemoteState{Key: "k", State: ProbeAllowed, Reason: Refused, History: h})
		if got := tr.Snapshot(r).History; len(got) != 3 || !got[0].At.Equal(time.Unix(2, 0)) {
			t.Fatalf("history %+v, want the newest 3", got)
		}
		if pub, _, _ := ff.snapshot(); len(pub) != 0 {
			t.Errorf("remote transitions echoed: %+v", pub)
		}
		tr.Remove("k")
		if tr.ApplyRemote("k", RemoteState{State: Disabled}) {
			t.Error("ApplyRemote on a removed record reported true")
		}
	})
}

func TestFleetOffPublishesNothing(t *testing.T) {
	cfg := syncCfg()
	cfg.StartEligible = true
	tr := NewTracker(cfg, nil, zerolog.Nop())
	ff := &fakeFleet{}
	tr.SetFleet(ff, ff, 0)
	tr.SetFleet(nil, nil, 0) // off again
	r := tr.Add("k", "up", &pipeUpstream{}, false)
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	if pub, _, _ := ff.snapshot(); len(pub) != 0 {
		t.Errorf("published with fleet mode off: %+v", pub)
	}
}

func TestFleetSharedIsWhatWasPublished(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true, Cooldown: CooldownConfig{Jitter: -1}, ScopeTargetHTTPError: ScopeTarget})
	ff := &fakeFleet{}
	tr.SetFleet(ff, nil, time.Second)
	r := tr.Add("k", "up", nil, false)
	if _, ok := tr.Shared("k"); ok {
		t.Fatal("a fresh record has something to put back")
	}
	// A per-target cooldown is local: still nothing to put back.
	tr.Fail(r, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "shop.example"})
	if s, ok := tr.Shared("k"); ok || len(tr.Snapshot(r).History) != 1 {
		t.Fatalf("after a per-target cooldown: Shared %+v %v, history %+v", s, ok, tr.Snapshot(r).History)
	}
	if _, ok := tr.Shared("nope"); ok {
		t.Fatal("an unknown record has something to put back")
	}
	last := func() RemoteState {
		t.Helper()
		pub, _, _ := ff.snapshot()
		if len(pub) == 0 {
			t.Fatal("nothing published")
		}
		return pub[len(pub)-1]
	}
	// Each shared state reads back as it was published.
	same := func(what string, n int) {
		t.Helper()
		want := last()
		got, ok := tr.Shared("k")
		if !ok || got.State != want.State || got.Reason != want.Reason || got.Stage != want.Stage ||
			got.Detail != want.Detail || !got.At.Equal(want.At) || !got.Until.Equal(want.Until) {
			t.Fatalf("%s: Shared %+v %v, published %+v", what, got, ok, want)
		}
		if len(got.History) != n {
			t.Errorf("%s: history %+v, want %d entries", what, got.History, n)
		}
	}
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	same("cooling", 1)
	clk.Advance(time.Second)
	tr.Disable(r, "maintenance")
	same("disabled", 2)
	clk.Advance(time.Second)
	tr.Enable(r)
	same("enabled", 3)
	// A remote state keeps the instance that made it, on the state and on
	// every history entry the fleet shared.
	at := wall(clk.Now()).Add(time.Second)
	tr.ApplyRemote("k", RemoteState{Key: "k", State: Disabled, From: ProbeAllowed, Reason: Operator, Stage: StageOperator,
		Detail: "disabled via admin API", At: at, Instance: "b",
		History: []Transition{{At: at, From: ProbeAllowed, To: Disabled, Reason: Operator, Stage: StageOperator,
			Detail: "disabled via admin API (instance b)", Instance: "b"}}})
	got, ok := tr.Shared("k")
	if !ok || got.State != Disabled || got.Instance != "b" || got.Detail != "disabled via admin API (instance b)" || !got.At.Equal(at) {
		t.Fatalf("after a remote disable: %+v %v", got, ok)
	}
	if len(got.History) != 1 || got.History[0].Instance != "b" {
		t.Errorf("history %+v", got.History)
	}
}

// TestFleetConfigDisabledHasTheLastWord: an upstream the config disables
// stays disabled whatever the fleet's record says (another instance's
// probe passed, an operator enabled it elsewhere); only the config
// changing enables it.
func TestFleetConfigDisabledHasTheLastWord(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	ff := &fakeFleet{}
	tr.SetFleet(ff, nil, time.Second)
	r := tr.Add("k", "up", nil, true)
	at := wall(clk.Now())
	for _, rs := range []RemoteState{
		{Key: "k", State: Eligible, From: ProbeAllowed, Stage: StageProbe, Detail: "probe passed", At: at, Instance: "b"},
		{Key: "k", State: ProbeAllowed, From: Disabled, Reason: Operator, Stage: StageOperator, Detail: "enabled by operator", At: at, Instance: "b"},
		{Key: "k", State: Cooling, From: Eligible, Reason: Refused, Stage: StageDial, Until: at.Add(time.Minute), At: at, Instance: "b"},
	} {
		tr.ApplyRemote("k", rs)
		if s := tr.Snapshot(r); s.State != Disabled || s.Detail != "disabled in config" {
			t.Fatalf("after a remote %v: %v (%s), want disabled in config", rs.State, s.State, s.Detail)
		}
	}
	// The config changing enables it.
	tr.Add("k", "up", nil, false)
	if got := tr.Snapshot(r).State; got != ProbeAllowed {
		t.Fatalf("after the config enabled it: %v, want probe_allowed", got)
	}
}

// TestFleetAutomaticRemoteKeepsOperatorDisable: a remote automatic
// transition (a failure another instance reported, raced with this
// instance's disable) never ends an operator's disable, local or remote;
// one from a shared record that knows a newer operator action (an enable
// this instance missed) does. Bug: a remote cooling replaced a local
// admin disable, and the record then went probe_allowed.
func TestFleetAutomaticRemoteKeepsOperatorDisable(t *testing.T) {
	clk := healthtest.NewClock(time.Unix(1_700_000_000, 0))
	tr := NewTracker(Config{StartEligible: true, Cooldown: CooldownConfig{Jitter: -1}}, clk, zerolog.Nop())
	ff := &fakeFleet{}
	tr.SetFleet(ff, ff, time.Second)
	r := tr.Add("k", "up", &pipeUpstream{}, false)
	tr.Disable(r, "maintenance")
	disabledAt := clk.Now()
	clk.Advance(time.Second)
	for _, rs := range []RemoteState{
		{State: Cooling, Reason: Timeout, Stage: StageDial, Until: clk.Now().Add(time.Minute), At: disabledAt.Add(-time.Millisecond)},
		{State: Cooling, Reason: Timeout, Stage: StageDial, Until: clk.Now().Add(time.Minute), At: clk.Now(), OpAt: disabledAt.Add(-time.Hour)},
		{State: Eligible, Stage: StageProbe, At: clk.Now(), OpAt: disabledAt},
	} {
		rs.Key = "k"
		tr.ApplyRemote("k", rs)
		if s := tr.Snapshot(r); s.State != Disabled || s.Reason != Operator {
			t.Fatalf("after remote %v (op at %v): %v %v, want the operator's disable", rs.State, rs.OpAt, s.State, s.Reason)
		}
	}
	// A remote operator disable holds the same way.
	tr.ApplyRemote("k", RemoteState{Key: "k", State: Disabled, Reason: Operator, Stage: StageOperator, At: clk.Now()})
	remoteAt := clk.Now()
	tr.ApplyRemote("k", RemoteState{Key: "k", State: Cooling, Reason: Refused, Stage: StageDial, Until: clk.Now().Add(time.Minute), At: clk.Now(), OpAt: remoteAt})
	if s := tr.Snapshot(r); s.State != Disabled {
		t.Fatalf("remote cooling ended a remote operator disable: %v", s.State)
	}
	// An eligible whose record knows a newer operator action (an enable)
	// ends it.
	tr.ApplyRemote("k", RemoteState{Key: "k", State: Eligible, Stage: StageProbe, At: clk.Now(), OpAt: remoteAt.Add(time.Millisecond)})
	if s := tr.Snapshot(r); s.State != Eligible {
		t.Fatalf("eligible after a newer enable: %v, want eligible", s.State)
	}
}

// TestFleetRevivePublishesNothing: an upstream put back in the config
// gets its kept record without publishing it to the fleet. Bug: the kept
// operator disable went out as a new operator action and undid an enable
// another instance had made while the upstream was out of this config.
func TestFleetRevivePublishesNothing(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	ff := &fakeFleet{grant: true}
	tr.SetFleet(ff, ff, time.Second)
	r := tr.Add("k", "up", nil, false)
	tr.Disable(r, "bad exit IPs")
	before := len(ff.published)
	tr.Remove("k")
	clk.Advance(4 * time.Second)
	r = tr.Add("k", "up", nil, false)
	if s := tr.Snapshot(r).State; s != Disabled {
		t.Fatalf("back in the config: %v, want its kept disable", s)
	}
	if pub, _, _ := ff.snapshot(); len(pub) != before {
		t.Errorf("published %+v on coming back, want nothing", pub[before:])
	}
}

// TestFleetOwnCoolingBackFromRedisIsSame: this instance's cooling, read
// back from the fleet with its until in milliseconds, is the same state:
// no history entry, no log line. Bug: the nanosecond local until never
// equalled it, so after a reload every resync re-applied the instance's
// own cooling (logged as "upstream enable recorded").
func TestFleetOwnCoolingBackFromRedisIsSame(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	ff := &fakeFleet{}
	tr.SetFleet(ff, ff, time.Second)
	r := tr.Add("k", "up", nil, false)
	clk.Advance(123456789 * time.Nanosecond) // a wall time with sub-millisecond digits
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	s := tr.Snapshot(r)
	back := time.UnixMilli(s.Until.UnixMilli())
	if back.Equal(s.Until) {
		t.Fatalf("until %v has no sub-millisecond part: the test proves nothing", s.Until)
	}
	tr.ApplyRemote("k", RemoteState{Key: "k", State: Cooling, From: Eligible, Reason: Refused, Stage: StageDial,
		Until: back, Streak: s.Streak, At: s.History[0].At, Instance: "a"})
	if n := len(tr.Snapshot(r).History); n != 1 {
		t.Errorf("history has %d entries after reading its own cooling back, want 1", n)
	}
}
