package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

const testProbeURL = "http://probe.test/health"

type step struct {
	name string
	do   func(tr *Tracker, r *Record, up *pipeUpstream)
}

var (
	failRefused = step{"fail refused", func(tr *Tracker, r *Record, _ *pipeUpstream) {
		tr.Fail(r, &Failure{Class: Refused, Stage: StageDial, Err: errors.New("connection refused")})
	}}
	failAuth = step{"fail auth", func(tr *Tracker, r *Record, _ *pipeUpstream) {
		tr.Fail(r, &Failure{Class: AuthRejected, Stage: StageProxyAuth, Err: errors.New("407")})
	}}
	probeBad = step{"upstream breaks", func(_ *Tracker, _ *Record, up *pipeUpstream) { up.status.Store(502) }}
	probeOK  = step{"upstream heals", func(_ *Tracker, _ *Record, up *pipeUpstream) { up.status.Store(200) }}
	disable  = step{"disable", func(tr *Tracker, r *Record, _ *pipeUpstream) { tr.Disable(r, "maintenance") }}
	enable   = step{"enable", func(tr *Tracker, r *Record, _ *pipeUpstream) { tr.Enable(r) }}
)

// wait advances the fake clock by d and runs whatever came due.
func wait(d time.Duration) step {
	return step{"wait " + d.String(), func(tr *Tracker, _ *Record, _ *pipeUpstream) {
		tr.clock.(interface{ Advance(time.Duration) }).Advance(d)
	}}
}

type hop struct {
	from, to State
	reason   Class
	stage    Stage
}

func TestTransitions(t *testing.T) {
	perm := Config{Cooldown: CooldownConfig{AuthRejected: ClassPolicy{PermanentAfter: 2}}}
	tests := []struct {
		name      string
		cfg       Config
		disabled  bool
		before    func(up *pipeUpstream) // before the first probe
		steps     []step
		wantState State
		wantHops  []hop
	}{
		{
			name: "new record is probed and becomes eligible", steps: nil, wantState: Eligible,
			wantHops: []hop{{ProbeAllowed, Eligible, ClassNone, StageProbe}},
		},
		{
			name: "new record failing its probe cools", before: func(up *pipeUpstream) { up.status.Store(502) }, wantState: Cooling,
			wantHops: []hop{{ProbeAllowed, Cooling, UpstreamError, StageProbe}},
		},
		{
			name: "start eligible", cfg: Config{StartEligible: true}, wantState: Eligible,
		},
		{
			name: "disabled in config stays disabled", disabled: true, wantState: Disabled,
		},
		{
			name: "eligible to cooling", steps: []step{failRefused}, wantState: Cooling,
			wantHops: []hop{{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Cooling, Refused, StageDial}},
		},
		{
			name: "cooling to probe_allowed to eligible", steps: []step{failRefused, wait(30 * time.Second)}, wantState: Eligible,
			wantHops: []hop{
				{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Cooling, Refused, StageDial},
				{Cooling, ProbeAllowed, Refused, StageDial}, {ProbeAllowed, Eligible, ClassNone, StageProbe},
			},
		},
		{
			name: "probe_allowed to cooling on a failed probe", steps: []step{failRefused, probeBad, wait(30 * time.Second)}, wantState: Cooling,
			wantHops: []hop{
				{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Cooling, Refused, StageDial},
				{Cooling, ProbeAllowed, Refused, StageDial}, {ProbeAllowed, Cooling, UpstreamError, StageProbe},
			},
		},
		{
			name: "eligible to disabled to probe_allowed to eligible", steps: []step{disable, enable}, wantState: Eligible,
			wantHops: []hop{
				{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Disabled, Operator, StageOperator},
				{Disabled, ProbeAllowed, Operator, StageOperator}, {ProbeAllowed, Eligible, ClassNone, StageProbe},
			},
		},
		{
			name: "cooling to disabled", steps: []step{failRefused, disable}, wantState: Disabled,
			wantHops: []hop{{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Cooling, Refused, StageDial}, {Cooling, Disabled, Operator, StageOperator}},
		},
		{
			name: "cooling to probe_allowed by operator", steps: []step{failRefused, probeBad, enable}, wantState: Cooling,
			wantHops: []hop{
				{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Cooling, Refused, StageDial},
				{Cooling, ProbeAllowed, Operator, StageOperator}, {ProbeAllowed, Cooling, UpstreamError, StageProbe},
			},
		},
		{
			name: "failed probe, cooling again, then disabled", before: func(up *pipeUpstream) { up.status.Store(502) },
			steps: []step{wait(30 * time.Second), disable}, wantState: Disabled,
			wantHops: []hop{
				{ProbeAllowed, Cooling, UpstreamError, StageProbe}, {Cooling, ProbeAllowed, UpstreamError, StageProbe},
				{ProbeAllowed, Cooling, UpstreamError, StageProbe}, {Cooling, Disabled, Operator, StageOperator},
			},
		},
		{
			name: "a passing probe resets permanent_after", cfg: perm,
			steps: []step{failAuth, wait(5 * time.Minute), failAuth}, wantState: Cooling,
			wantHops: []hop{
				{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Cooling, AuthRejected, StageProxyAuth},
				{Cooling, ProbeAllowed, AuthRejected, StageProxyAuth}, {ProbeAllowed, Eligible, ClassNone, StageProbe},
				{Eligible, Cooling, AuthRejected, StageProxyAuth},
			},
		},
		{
			name: "permanent_after counts probe failures", cfg: perm,
			steps:     []step{failAuth, step{"probe auth fails", func(_ *Tracker, _ *Record, up *pipeUpstream) { up.mode.Store(pipeRefuse) }}, wait(5 * time.Minute)},
			wantState: Cooling, // refused on the probe is another class
			wantHops: []hop{
				{ProbeAllowed, Eligible, ClassNone, StageProbe}, {Eligible, Cooling, AuthRejected, StageProxyAuth},
				{Cooling, ProbeAllowed, AuthRejected, StageProxyAuth}, {ProbeAllowed, Cooling, Refused, StageProbe},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Probe.URL = testProbeURL
			tr, _ := newFakeTracker(t, tt.cfg)
			up := &pipeUpstream{}
			if tt.before != nil {
				tt.before(up)
			}
			r := tr.Add("k", "up", up, tt.disabled)
			drive(t, tr)
			for _, s := range tt.steps {
				s.do(tr, r, up)
				drive(t, tr)
			}
			snap := tr.Snapshot(r)
			if snap.State != tt.wantState {
				t.Errorf("state = %v, want %v", snap.State, tt.wantState)
			}
			if got := tr.Eligible(r); got != (tt.wantState == Eligible) {
				t.Errorf("Eligible = %v", got)
			}
			var got []hop
			for _, h := range snap.History {
				got = append(got, hop{h.From, h.To, h.Reason, h.Stage})
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.wantHops) {
				t.Errorf("history\n got %v\nwant %v", got, tt.wantHops)
			}
		})
	}
}

func TestPermanentAfterDisables(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true, Probe: ProbeConfig{URL: testProbeURL},
		Cooldown: CooldownConfig{AuthRejected: ClassPolicy{PermanentAfter: 3}}})
	up := &pipeUpstream{}
	up.mode.Store(pipeRefuse)
	r := tr.Add("k", "up", funcDialer(func(ctx context.Context, _, _ string) (net.Conn, error) {
		return nil, &Failure{Class: AuthRejected, Stage: StageProxyAuth, Err: errors.New("407")}
	}), false)
	failAuth.do(tr, r, up) // 1: cooling 5m
	for _, want := range []State{Cooling, Disabled} {
		wait(time.Hour).do(tr, r, up)
		drive(t, tr) // probe fails auth: 2 → cooling, 3 → disabled
		if got := tr.Snapshot(r).State; got != want {
			t.Fatalf("state = %v, want %v", got, want)
		}
	}
	s := tr.Snapshot(r)
	if s.Reason != AuthRejected || s.Stage != StageProbe || !s.Until.IsZero() {
		t.Errorf("disabled record: reason %v stage %v until %v", s.Reason, s.Stage, s.Until)
	}
	// Disabled: the operator can enable it; the next probe decides.
	tr.Enable(r)
	if got := tr.Snapshot(r).State; got != ProbeAllowed {
		t.Errorf("after Enable: %v", got)
	}
}

func TestBackoffSequenceThroughProbes(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true, Probe: ProbeConfig{URL: testProbeURL}})
	up := &pipeUpstream{}
	up.status.Store(503)
	r := tr.Add("k", "up", up, false)
	start := clk.Now()
	failRefused.do(tr, r, up)
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i, d := range want {
		s := tr.Snapshot(r)
		if got := s.Until.Sub(clk.Now()); s.State != Cooling || got != d {
			t.Fatalf("cooling %d: state %v, cooldown %v, want %v", i+1, s.State, got, d)
		}
		if s.Streak != i+1 {
			t.Errorf("streak = %d, want %d", s.Streak, i+1)
		}
		clk.Advance(d - time.Nanosecond)
		drive(t, tr)
		if tr.Admit(r) || up.requests.Load() != int64(i) {
			t.Fatalf("before the deadline: admit or probe (%d probes)", up.requests.Load())
		}
		clk.Advance(time.Nanosecond)
		drive(t, tr)
		if got := up.requests.Load(); got != int64(i+1) {
			t.Fatalf("probes = %d, want %d", got, i+1)
		}
	}
	// Each failed probe is a failure at stage probe too, not only a probe count.
	if s := tr.Snapshot(r); s.Stages[StageProbe] != uint64(len(want)) || s.ProbesFailed != uint64(len(want)) {
		t.Errorf("failures at stage probe %d, probes failed %d; want %d each", s.Stages[StageProbe], s.ProbesFailed, len(want))
	}
	// A passing probe resets the streak.
	up.status.Store(200)
	clk.Advance(10 * time.Minute)
	drive(t, tr)
	if s := tr.Snapshot(r); s.State != Eligible || s.Streak != 0 {
		t.Fatalf("after pass: %v streak %d", s.State, s.Streak)
	}
	failRefused.do(tr, r, up)
	if got := tr.Snapshot(r).Until.Sub(clk.Now()); got != 30*time.Second {
		t.Errorf("cooldown after reset = %v, want 30s", got)
	}
	_ = start
}

func TestAfter(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true, Cooldown: CooldownConfig{Timeout: ClassPolicy{After: 3}}})
	r := tr.Add("k", "up", nil, false)
	to := &Failure{Class: Timeout, Stage: StageDial}
	tr.Fail(r, to)
	tr.Fail(r, to)
	tr.Fail(r, &Failure{Class: SlowBody, Stage: StageBody, Target: ""}) // another class; its after is 1
	if got := tr.Snapshot(r).State; got != Cooling {
		t.Fatalf("slow_body with after=1: %v", got)
	}

	tr2, _ := newFakeTracker(t, Config{StartEligible: true, Cooldown: CooldownConfig{Timeout: ClassPolicy{After: 3}}})
	r2 := tr2.Add("k", "up", nil, false)
	tr2.Fail(r2, to)
	tr2.Fail(r2, to)
	tr2.Success(r2) // resets the run
	tr2.Fail(r2, to)
	tr2.Fail(r2, to)
	if got := tr2.Snapshot(r2).State; got != Eligible {
		t.Fatalf("after success reset, 2 of 3: %v", got)
	}
	tr2.Fail(r2, to)
	s := tr2.Snapshot(r2)
	if s.State != Cooling || s.Failures[Timeout] != 5 || s.Stages[StageDial] != 5 || s.Successes != 1 {
		t.Fatalf("third consecutive: %+v", s)
	}
}

func TestStaleFailuresOnlyCount(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, false)
	ep := tr.Epoch(r)
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	until := tr.Snapshot(r).Until
	clk.Advance(time.Second)
	tr.Fail(r, &Failure{Class: Timeout, Stage: StageFirstByte}) // a tunnel opened before the cooling
	s := tr.Snapshot(r)
	if s.Until != until || s.Reason != Refused || s.Streak != 1 || len(s.History) != 1 {
		t.Errorf("late failure extended the cooldown: %+v", s)
	}
	if s.Failures[Timeout] != 1 || s.Stages[StageFirstByte] != 1 {
		t.Errorf("late failure not counted: %v %v", s.Failures, s.Stages)
	}
	// FailEpoch with the old epoch on a record that recovered is counted only.
	tr.Enable(r)
	clk.Advance(time.Second)
	tr.readmitForTest(r)
	tr.FailEpoch(r, ep, &Failure{Class: Refused, Stage: StageDial})
	if got := tr.Snapshot(r).State; got != Eligible {
		t.Errorf("stale FailEpoch changed state to %v", got)
	}
	tr.FailEpoch(r, tr.Epoch(r), &Failure{Class: Refused, Stage: StageDial})
	if got := tr.Snapshot(r).State; got != Cooling {
		t.Errorf("current FailEpoch: %v", got)
	}
	// FailStale on an eligible record is counted only.
	tr.Enable(r)
	tr.readmitForTest(r)
	tr.FailStale(r, &Failure{Class: AuthRejected, Stage: StageProxyAuth})
	if s := tr.Snapshot(r); s.State != Eligible || s.Failures[AuthRejected] != 1 {
		t.Errorf("FailStale: state %v, auth_rejected failures %d; want eligible, 1", s.State, s.Failures[AuthRejected])
	}
	// nil and unknown classes.
	tr.Fail(r, nil)
	tr.Fail(r, &Failure{Class: ClassNone, Stage: Stage(200)})
	if got := tr.Snapshot(r).Failures[UpstreamError]; got != 1 {
		t.Errorf("ClassNone counted as upstream_error: %d", got)
	}
}

// readmitForTest makes r eligible as a passing probe would.
func (t *Tracker) readmitForTest(r *Record) {
	var e effects
	r.mu.Lock()
	t.readmit(t.settings(), r, t.clock.Now(), "test", &e)
	r.mu.Unlock()
	t.apply(&e)
}

func TestLazyProbeAllowed(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, false)
	tr.Fail(r, &Failure{Class: Timeout, Stage: StageDial})
	clk.Advance(15 * time.Second)
	// No prober ran: the record reads probe_allowed but is not admitted.
	s := tr.Snapshot(r)
	if s.State != ProbeAllowed || !s.Until.IsZero() || tr.Admit(r) {
		t.Errorf("lazy: %v until %v admit %v", s.State, s.Until, tr.Admit(r))
	}
	if c := tr.Counts(); c[ProbeAllowed] != 1 || c[Eligible] != 0 || c[Cooling] != 0 || c[Disabled] != 0 {
		t.Errorf("Counts = %v", c)
	}
}

func TestAddKeepsExisting(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "old", nil, false)
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	tr.Success(r)
	r2 := tr.Add("k", "new", &pipeUpstream{}, false)
	if r2 != r {
		t.Fatal("Add returned a new record for an existing key")
	}
	s := tr.Snapshot(r)
	if s.Name != "new" || s.State != Cooling || s.Successes != 1 || len(s.History) != 1 {
		t.Errorf("kept record: %+v", s)
	}
	if tr.Lookup("k") != r || len(tr.Records()) != 1 {
		t.Error("Lookup/Records")
	}
	tr.Remove("k")
	if tr.Lookup("k") != nil || tr.Admit(r) || tr.Eligible(r) {
		t.Error("removed record still visible or admitted")
	}
	tr.Enable(r)
	tr.Fail(r, &Failure{Class: Refused})
	if got := tr.Snapshot(r).State; got != Disabled {
		t.Errorf("removed record changed: %v", got)
	}
}

func TestHistoryBounded(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true, HistoryLen: 4})
	r := tr.Add("k", "up", nil, false)
	for i := range 10 {
		tr.Disable(r, fmt.Sprint("d", i))
		clk.Advance(time.Second)
		tr.Enable(r)
	}
	h := tr.Snapshot(r).History
	if len(h) != 4 || h[3].To != ProbeAllowed || h[2].Detail != "d9" || !h[0].At.Before(h[3].At) {
		t.Errorf("history = %+v", h)
	}
}

func TestProbeAllowedToDisabled(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	up := &pipeUpstream{}
	r := tr.Add("k", "up", up, false)
	tr.Disable(r, "not yet")
	drive(t, tr) // the queued probe is stale now
	s := tr.Snapshot(r)
	if s.State != Disabled || up.requests.Load() != 0 || len(s.History) != 1 ||
		s.History[0].From != ProbeAllowed || s.History[0].Detail != "not yet" {
		t.Errorf("snapshot %+v, probes %d", s, up.requests.Load())
	}
	tr.Disable(r, "again") // no-op
	if got := len(tr.Snapshot(r).History); got != 1 {
		t.Errorf("disabling a disabled record recorded %d entries", got)
	}
}

func TestAddAppliesConfigDisabled(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, true)
	if tr.Add("k", "up", nil, false); tr.Snapshot(r).State != ProbeAllowed {
		t.Fatalf("config enable: %v", tr.Snapshot(r).State)
	}
	tr.Add("k", "up", nil, true)
	if s := tr.Snapshot(r); s.State != Disabled || s.Detail != "disabled in config" {
		t.Fatalf("config disable on reload: %+v", s)
	}
	// An operator's Disable survives a reload that does not disable.
	r2 := tr.Add("k2", "up2", nil, false)
	tr.Disable(r2, "operator")
	tr.Add("k2", "up2", nil, false)
	if got := tr.Snapshot(r2).State; got != Disabled {
		t.Errorf("operator disable lost on reload: %v", got)
	}
}
