package health

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"
)

// ErrRunning is returned by Run when another Run of the same tracker is
// active: there is exactly one prober loop per tracker (STYLE 42).
var ErrRunning = errors.New("health: prober is already running")

// queued is a record waiting for a probe start, at the epoch it was queued.
type queued struct {
	rec   *Record
	epoch uint64
}

// Run is the single prober loop. It sleeps until the earliest deadline
// (cooling end, slow-start window, per-target cooldown end) on the tracker
// clock's After, with no polling; mutators wake it when they schedule an
// earlier one. A record whose cooldown ended moves to probe_allowed and
// joins a FIFO of records due for a probe; probes start from it
//
//   - one at a time per record (single-flight),
//   - at most Probe.MaxConcurrent in flight,
//   - spaced at least 1/Probe.Rate apart (a token bucket of depth one on
//     the tracker clock), so no one-second window sees more than Rate
//     starts, however many records came due together.
//
// Probe jitter comes from the cooldown jitter (records that cooled together
// come due at different times) and from that spacing.
//
// With no probe URL, records due for a probe become eligible at once (with
// slow start when a failure set them aside, see readmit), and a warning is
// logged when Run starts.
//
// Each pass of the loop reads the settings once; SetConfig wakes the loop,
// so a new probe URL, rate or concurrency limit takes effect at the next
// probe start. The in-flight count and the time of the last start survive
// the change: a lower limit lets running probes finish and starts nothing
// until they are below it, a new rate spaces the next start from the last.
//
// Run returns nil when ctx is done, after every probe goroutine it started
// has returned; probes cut short by that are dropped (neutral). Records it
// leaves due for a probe (queued, or their probe cut short) are probed by
// the next Run of the tracker. It returns ErrRunning if the tracker
// already has a running loop.
func (t *Tracker) Run(ctx context.Context) error {
	if !t.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer t.running.Store(false)
	switch s := t.settings(); {
	case s.probeErr != nil:
		t.log.Error().Str("stage", StageProbe.String()).Msg("invalid probe url: records are re-admitted without a probe")
	case s.probe == nil:
		t.log.Warn().Str("stage", StageProbe.String()).Msg("no probe url: records are re-admitted without a probe")
	}

	var ready []queued // records due for a probe, in order
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		// What was queued goes back to the tracker's schedule, so that
		// the next Run probes it: a probe_allowed record must never be
		// left without a probe queued (probes cut short above do the
		// same through ensureProbe).
		now := t.clock.Now()
		for _, q := range ready {
			t.sched.push(item{at: now, rec: q.rec, epoch: q.epoch, kind: kindProbe})
		}
	}()
	// done reports finished probes. Its room fits the initial limit; a
	// reload may raise the limit, so a probe that finds it full waits for
	// Run to receive, or for pctx, which Run cancels before waiting on wg:
	// a finishing probe never blocks Run's return.
	done := make(chan struct{}, t.settings().cfg.Probe.MaxConcurrent)

	var (
		inflight  int
		due       []item
		lastStart time.Time // latest probe start; zero: none yet
		timerC    <-chan time.Time
		armed     time.Time
	)
	for {
		s := t.settings()
		now := t.clock.Now()
		var at time.Time
		var pending bool
		due, at, pending = t.sched.popDue(now, due[:0])
		wake, again := false, false
		for _, it := range due {
			switch it.kind {
			case kindProbe:
				if q, ok := t.dueProbe(s, it, now); ok {
					ready = append(ready, q)
				}
			case kindRamp:
				w, nx := t.rampWake(it.rec, it)
				wake = wake || w
				if nx != nil {
					t.sched.push(*nx)
					again = true
				}
			case kindTarget:
				wake = true
			case kindForget:
				t.forget(now)
				again = true // it may have scheduled the next sweep
			}
		}
		if wake {
			t.broadcast()
		}
		if again {
			continue // the heap's earliest deadline may have changed
		}

		if s.probe == nil && len(ready) > 0 {
			// A reload removed the probe URL: nothing waits for a probe.
			for _, q := range ready {
				t.readmitQueued(s, q, now)
			}
			ready = ready[:0]
		}
		maxInflight := s.cfg.Probe.MaxConcurrent
		var next time.Time // earliest permitted next probe start
		if !lastStart.IsZero() {
			next = lastStart.Add(s.interval)
		}
		for len(ready) > 0 && inflight < maxInflight && !now.Before(next) {
			q := ready[0]
			ready = ready[1:]
			d, ok := t.claimProbe(q)
			if !ok {
				continue
			}
			inflight++
			lastStart, next = now, now.Add(s.interval)
			wg.Add(1)
			// Owned by Run: it exits when the probe ends (bounded by
			// Probe.Timeout and by pctx, which Run cancels before waiting
			// on wg).
			go func(p *probeSpec) {
				defer wg.Done()
				t.gatedProbe(pctx, p, q, d)
				select {
				case done <- struct{}{}:
				case <-pctx.Done():
				}
			}(s.probe)
		}

		if len(ready) > 0 && inflight < maxInflight && (!pending || next.Before(at)) {
			at, pending = next, true
		}
		switch {
		case !pending:
			timerC = nil
		case timerC == nil || !at.Equal(armed):
			timerC, armed = t.clock.After(at.Sub(t.clock.Now())), at
		}

		select {
		case <-ctx.Done():
			return nil
		case <-t.kick:
		case <-timerC:
			timerC = nil
		case <-done:
			inflight--
		}
	}
}

// dueProbe handles a kindProbe item: a cooling record whose deadline
// passed moves to probe_allowed. It returns the record to queue for a
// probe, or re-admits it at once when s configures no probe.
func (t *Tracker) dueProbe(s *settings, it item, now time.Time) (queued, bool) {
	r := it.rec
	var e effects
	defer t.apply(&e)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed || it.epoch != r.epoch {
		return queued{}, false
	}
	switch State(r.state.Load()) {
	case Cooling:
		if now.Before(r.deadline) {
			return queued{}, false // cannot happen: items are pushed at the deadline
		}
		if s.probe == nil {
			t.readmit(s, r, now, "cooldown ended; no probe configured", &e)
			return queued{}, false
		}
		r.deadline, r.until = time.Time{}, time.Time{}
		t.setState(r, now, ProbeAllowed, r.reason, r.stage, "cooldown ended", nil, &e)
	case ProbeAllowed:
		if s.probe == nil {
			t.readmit(s, r, now, "no probe configured", &e)
			return queued{}, false
		}
	default:
		return queued{}, false
	}
	return queued{rec: r, epoch: r.epoch}, true
}

// readmit makes r eligible after a passing probe (or without one when none
// is configured): the streak and failure runs restart, and when a failure
// set r aside since its last admission, slow start begins, as s
// configures it. The ramp protects an upstream that was failing from the
// whole queue of clients waiting for it; one that did not fail (its first
// admission, an operator's enable of an upstream disabled while it served,
// a record eligible before a restart, probed first) needs none. Caller
// holds r.mu.
func (t *Tracker) readmit(s *settings, r *Record, now time.Time, detail string, e *effects) {
	failed := r.failed
	r.failed = false
	r.streak = 0
	r.after = [numClasses]int{}
	r.consec = [numClasses]int{}
	r.pending.Store(false)
	r.deadline, r.until = time.Time{}, time.Time{}
	t.setState(r, now, Eligible, ClassNone, StageProbe, detail, nil, e)
	if failed {
		t.startRamp(s, r, now, e)
		return
	}
	r.ramping.Store(false)
	r.publish() // setState left the gate asking until the ramp was decided
}

// readmitQueued re-admits q's record without a probe, for records queued
// before a reload removed the probe URL. A record that moved on, or whose
// probe (under the old URL) is still running, is left alone.
func (t *Tracker) readmitQueued(s *settings, q queued, now time.Time) {
	r := q.rec
	var e effects
	r.mu.Lock()
	if !r.removed && q.epoch == r.epoch && !r.probing && State(r.state.Load()) == ProbeAllowed {
		t.readmit(s, r, now, "no probe configured", &e)
	}
	r.mu.Unlock()
	t.apply(&e)
}

// ensureProbe queues a probe of r, due after delay, for r's current epoch
// when r is probe_allowed and no probe of it runs. Every path on which a
// probe ends without moving r on calls it, so that a probe_allowed record
// always has a probe queued or running: a result discarded as stale (r
// changed epoch while the probe ran: an operator's disable and enable, a
// credentials change; the item of that newer epoch was dropped by
// claimProbe because the probe was running), a probe another instance owns
// (probeDeferred), a probe cut short by Run stopping. A duplicate of an
// item still queued is harmless: claimProbe starts one probe per record at
// a time, and once its result is applied r has a newer epoch.
func (t *Tracker) ensureProbe(r *Record, delay time.Duration) {
	r.mu.Lock()
	due := !r.removed && !r.probing && State(r.state.Load()) == ProbeAllowed
	it := item{rec: r, epoch: r.epoch, kind: kindProbe}
	r.mu.Unlock()
	if due {
		it.at = t.clock.Now().Add(delay)
		t.sched.push(it)
		t.kickProber()
	}
}

// claimProbe marks q's record as probing if it is still probe_allowed at
// q's epoch and no probe of it runs, and returns its dialer.
func (t *Tracker) claimProbe(q queued) (Dialer, bool) {
	r := q.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed || q.epoch != r.epoch || r.probing || State(r.state.Load()) != ProbeAllowed ||
		t.clock.Now().Before(r.probeNotTill) {
		return nil, false
	}
	r.probing = true
	return r.dialer, true
}

// localProbeRetry is how soon a probe that could not run for want of a
// local resource (LocalResource) is tried again.
const localProbeRetry = time.Second

// LocalResource reports an error of this machine, not of an upstream or
// a target: out of file descriptors, ephemeral ports, buffers or memory.
// Such a failure is nobody's: it cools nothing.
func LocalResource(err error) bool {
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.EADDRNOTAVAIL, syscall.ENOBUFS, syscall.ENOMEM} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

// runProbe probes q's record through d with p (the probe settings in force
// when it was claimed) and applies the result, unless the record moved on
// meanwhile (stale epoch) or Run is stopping. Its caller then calls
// ensureProbe: a record left probe_allowed needs another probe.
func (t *Tracker) runProbe(ctx context.Context, p *probeSpec, q queued, d Dialer) {
	r := q.rec
	start := t.clock.Now()
	setup, err := p.run(ctx, d, t.clock)
	now := t.clock.Now()
	s := t.settings() // a reload during the probe applies to its outcome
	keep := probeTargetKeep(s.policy)
	var chk *probeCheck
	if w := p.target.toCheck(r, err, now, keep); w != nil && ctx.Err() == nil {
		// Before the target is taken for down, the upstream whose probe
		// passed last is asked again (probeTarget); no lock is held.
		chk = t.checkTarget(ctx, p, w)
		now = t.clock.Now()
	}
	var e effects
	r.mu.Lock()
	r.probing = false
	if ctx.Err() != nil {
		r.mu.Unlock()
		return // Run is stopping: neither a pass nor a failure
	}
	name := r.name
	if err != nil && LocalResource(err) && !r.removed && q.epoch == r.epoch {
		// This machine could not make the probe's connections: nothing
		// is known of the upstream. It stays probe_allowed (cooling it
		// would keep it out for a growing cooldown after the pressure is
		// gone) and is probed again shortly, not at once.
		r.probeNotTill = now.Add(localProbeRetry)
		r.mu.Unlock()
		t.sched.push(item{at: now.Add(localProbeRetry), rec: r, epoch: q.epoch, kind: kindProbe})
		t.kickProber()
		t.log.Debug().Str("upstream", name).Err(err).Msg("probe could not run: out of a local resource")
		return
	}
	// What the probe tells of the probe target itself (probeTarget; its
	// lock nests inside r.mu and calls nothing out).
	v := p.target.weigh(r, err, chk, now, keep, func(since time.Time) bool {
		return t.seen.reachedByOther(p.seenKey, nil, since)
	})
	r.lastProbe = wall(now)
	if err == nil {
		r.probesOK++
		r.lastProbeOK.Store(r.lastProbe.UnixNano())
	} else {
		r.probesFailed++
	}
	if !r.removed && q.epoch == r.epoch {
		if err == nil {
			t.readmit(s, r, now, "probe passed", &e)
		} else {
			class := classifyProbe(err)
			// A failed probe is a classified failure at stage probe like
			// any other: it shows in failures and failures_by_stage, not
			// only in the probe counters.
			r.countFailure(class, StageProbe, 1)
			if v.down {
				t.coolAtBase(s, r, now, class, truncate("probe target seems down: "+err.Error(), maxDetail), err, &e)
			} else {
				r.consec[class]++
				r.pending.Store(true)
				t.cool(s, r, now, class, StageProbe, detailOf(err), err, &e)
			}
		}
	}
	r.mu.Unlock()
	t.apply(&e)
	if v.changed {
		t.logProbeTarget(p, name, v, err)
	}
	if so, ok := d.(SetupObserver); ok && err == nil {
		so.ObserveSetup(setup)
	}
	if p := t.observer.Load(); p != nil {
		(*p).Probe(name, err == nil, now.Sub(start))
	}
}

// coolAtBase is cool for a probe that failed at a probe target taken for
// down (probeTarget): r cools for the base cooldown of class, and its
// streak and permanent_after run stay as they were (the fleet is told
// that streak), since nothing says the upstream is at fault. The failure
// is counted by the caller. Caller holds r.mu.
func (t *Tracker) coolAtBase(s *settings, r *Record, now time.Time, class Class, detail string, err error, e *effects) {
	r.reason, r.stage, r.detail = class, StageProbe, detail
	r.after = [numClasses]int{}
	r.failed = true
	d := s.policy.Cooldown(class, 1, s.rand())
	r.deadline = now.Add(d)
	r.until = wall(now).Add(d)
	t.setState(r, now, Cooling, class, StageProbe, detail, err, e)
	e.items = append(e.items, item{at: r.deadline, rec: r, epoch: r.epoch, kind: kindProbe})
}

// checkTarget probes p's target through w, the record whose probe passed
// last, while w is eligible: the evidence that the target answers is
// checked before it is set aside. The outcome changes nothing of w (it
// serves as it did); nil when w is not eligible any more.
func (t *Tracker) checkTarget(ctx context.Context, p *probeSpec, w *Record) *probeCheck {
	w.mu.Lock()
	d, name := w.dialer, w.name
	ok := !w.removed && d != nil && State(w.state.Load()) == Eligible
	w.mu.Unlock()
	if !ok {
		return nil
	}
	_, err := p.run(ctx, d, t.clock)
	t.log.Debug().Str("upstream", name).Str("target", p.addr).Str("stage", StageProbe.String()).AnErr("err", err).
		Msg("probe target checked through the upstream whose probe passed last")
	return &probeCheck{rec: w, err: err}
}

// logProbeTarget logs, once per change, that the probe target seems down
// (probes through different upstreams all fail there) or answers again;
// name and err are the probe's that made the change, v its verdict. A
// line saying the target answers names the upstream whose probe passed,
// never one whose probe failed (bug: "probe target reachable again" named
// a broken upstream, its probe just failed). It runs after every lock is
// released (STYLE 40).
func (t *Tracker) logProbeTarget(p *probeSpec, name string, v targetVerdict, err error) {
	if !v.down {
		ev := t.log.Info().Str("target", p.addr).Str("stage", StageProbe.String())
		switch {
		case v.upBy == nil:
			ev = ev.Str("detail", "client traffic reached its host:port")
		case err == nil:
			ev = ev.Str("upstream", name).Str("detail", "a probe passed")
		default:
			ev = ev.Str("upstream", v.upBy.Name()).Str("detail", "a probe through this upstream passed")
		}
		ev.Msg("probe target reachable again")
		return
	}
	t.log.Warn().Str("target", p.addr).Str("upstream", name).Str("stage", StageProbe.String()).Err(err).
		Msg("probe target seems down: probes through different upstreams fail there; their cooldowns stay at base")
}
