package health

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// These tests pin the prober's invariant: a probe_allowed record always
// has a probe queued or running. Each one reproduces a path that used to
// leave a record probe_allowed with nothing scheduled, for good.

// TestRunReenableDuringProbe: disable + enable while the probe of an
// earlier enable ran. The running probe's result is stale and discarded;
// the record must then be probed for its current epoch. It used to stay
// probe_allowed with no probe (the new epoch's item was dropped because
// the old probe was running, and the stale result queued nothing).
func TestRunReenableDuringProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.StartEligible = true
		tr := NewTracker(cfg, nil, zerolog.Nop())
		up := &pipeUpstream{delay: 2 * time.Second}
		r := tr.Add("k", "up", up, false)
		startRun(t, tr)

		tr.Disable(r, "")
		tr.Enable(r)
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		if !tr.Snapshot(r).Probing {
			t.Fatal("first probe not running")
		}
		tr.Disable(r, "")
		tr.Enable(r)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		s := tr.Snapshot(r)
		if got := up.requests.Load(); got != 2 {
			t.Errorf("probes = %d, want 2 (the stale one and one for the current epoch)", got)
		}
		if s.State != Eligible || s.Probing {
			t.Errorf("state %v probing %v, want eligible", s.State, s.Probing)
		}
	})
}

// TestEnableQueuesProbeForIdleProbeAllowed: enabling a probe_allowed record
// that no probe runs for makes sure one is queued, even if its queued item
// was lost.
func TestEnableQueuesProbeForIdleProbeAllowed(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	up := &pipeUpstream{}
	r := tr.Add("k", "up", up, false)
	if due, _, _ := tr.sched.popDue(tr.clock.Now(), nil); len(due) != 1 {
		t.Fatalf("new record scheduled %d items, want 1", len(due))
	} // dropped: nothing is queued for r any more
	v := tr.Version()
	tr.Enable(r)
	drive(t, tr)
	if s := tr.Snapshot(r); s.State != Eligible || up.requests.Load() != 1 {
		t.Errorf("after enable: state %v, probes %d; want eligible, 1", s.State, up.requests.Load())
	}
	if got := tr.Version() - v; got != 1 {
		t.Errorf("version +%d, want +1 (the passing probe; enable itself is no transition)", got)
	}
}

// TestRunFleetDeferredWhileReenabled: the probe gate says another instance
// owns the probe, and meanwhile the record was disabled and enabled (its
// new item was dropped: the deferred probe still held the probing mark).
// The retry must be for the current epoch; it used to be skipped as stale.
func TestRunFleetDeferredWhileReenabled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(syncCfg(), nil, zerolog.Nop())
		up := &pipeUpstream{}
		r := tr.Add("k", "up", up, false)
		g := &hookGate{}
		g.hook = func() bool {
			if g.asked.Add(1) > 1 {
				return true
			}
			tr.Disable(r, "")
			tr.Enable(r)
			// Past the probe spacing (1/Probe.Rate): Run takes the new
			// item, finds the record probing, and drops it.
			time.Sleep(time.Second)
			return false
		}
		tr.SetFleet(&fakeFleet{}, g, time.Second)
		startRun(t, tr)
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if s := tr.Snapshot(r); s.State != Eligible || up.requests.Load() != 1 {
			t.Errorf("state %v, probes %d, gate asked %d; want eligible, 1 probe", s.State, up.requests.Load(), g.asked.Load())
		}
	})
}

// hookGate is a ProbeGate whose answer comes from hook.
type hookGate struct {
	asked atomic.Int32
	hook  func() bool
}

func (g *hookGate) TryProbe(string) (func(), bool) { return func() {}, g.hook() }

// TestRunRestartProbesWhatWasPending: records whose probe was cut short by
// Run stopping, or that were queued and not yet started, are probed by the
// next Run of the tracker. They used to be lost with the stopped loop.
func TestRunRestartProbesWhatWasPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.Probe.MaxConcurrent = 1
		tr := NewTracker(cfg, nil, zerolog.Nop())
		a := &pipeUpstream{delay: 2 * time.Second}
		b := &pipeUpstream{}
		ra := tr.Add("a", "a", a, false)
		rb := tr.Add("b", "b", b, false)

		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- tr.Run(ctx) }()
		time.Sleep(time.Second)
		synctest.Wait()
		if !tr.Snapshot(ra).Probing || tr.Snapshot(rb).Probing {
			t.Fatal("want a probing and b waiting for the concurrency limit")
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}

		startRun(t, tr)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for _, r := range []*Record{ra, rb} {
			if s := tr.Snapshot(r); s.State != Eligible {
				t.Errorf("%s after the second Run: %v, want eligible", s.Name, s.State)
			}
		}
	})
}

// slowAuthDialer stands for an upstream dialed with credentials it
// rejects: after delay, every dial fails with auth_rejected.
type slowAuthDialer struct {
	delay time.Duration
	dials atomic.Int32
}

func (d *slowAuthDialer) DialContext(ctx context.Context, _, _ string) (net.Conn, error) {
	d.dials.Add(1)
	select {
	case <-time.After(d.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, &Failure{Class: AuthRejected, Stage: StageProxyAuth, Err: errors.New("407")}
}

// TestRunCredentialsChangedDuringProbe: the config's password is fixed
// while a probe with the old one runs. The old probe's result is
// discarded, whatever it is, and the record is probed with the new
// credentials as soon as it ends. It used to apply the old probe's
// auth_rejected and cool the record for the whole auth_rejected base.
func TestRunCredentialsChangedDuringProbe(t *testing.T) {
	tests := []struct {
		name     string
		eligible bool // Config.StartEligible
		// before brings r to a probe running with the old credentials.
		before func(tr *Tracker, r *Record)
		old    func() Dialer
	}{
		{
			name: "after an auth_rejected cooldown", eligible: true,
			before: func(tr *Tracker, r *Record) {
				tr.Fail(r, &Failure{Class: AuthRejected, Stage: StageProxyAuth, Err: errors.New("407")})
				time.Sleep(tr.Policy().For(AuthRejected).Base)
			},
			old: func() Dialer { return &slowAuthDialer{delay: 2 * time.Second} },
		},
		{
			name:   "first probe of a new upstream",
			before: func(tr *Tracker, r *Record) {},
			old:    func() Dialer { return &slowAuthDialer{delay: 2 * time.Second} },
		},
		{
			name:   "old credentials pass",
			before: func(tr *Tracker, r *Record) {},
			old:    func() Dialer { return &pipeUpstream{delay: 2 * time.Second} },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := syncCfg()
				cfg.StartEligible = tc.eligible
				tr := NewTracker(cfg, nil, zerolog.Nop())
				r := tr.Add("k", "up", tc.old(), false)
				startRun(t, tr)
				tc.before(tr, r)
				time.Sleep(500 * time.Millisecond)
				synctest.Wait()
				if s := tr.Snapshot(r); s.State != ProbeAllowed || !s.Probing {
					t.Fatalf("before the change: state %v probing %v, want a probe running", s.State, s.Probing)
				}

				fixed := &pipeUpstream{}
				tr.Add("k", "up", fixed, false) // what a reload does, then:
				tr.CredentialsChanged(r)
				time.Sleep(5 * time.Second)
				synctest.Wait()
				s := tr.Snapshot(r)
				if s.State != Eligible || fixed.requests.Load() != 1 {
					t.Errorf("after the change: state %v (%v), probes with the new credentials %d; want eligible, 1",
						s.State, s.Reason, fixed.requests.Load())
				}
				if s.Streak != 0 {
					t.Errorf("streak %d, want 0", s.Streak)
				}
			})
		})
	}
}
