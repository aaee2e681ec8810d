package health

import (
	"math"
	"time"
)

// ramp is a record's slow start when it is re-admitted after a failure
// set it aside (issue 3; readmit says when): in the k-th second after
// recovery (k from 0) at most SlowStartRate×2^k new tunnels are admitted,
// until Config.SlowStart has elapsed. Seconds are counted from the
// recovery instant on the tracker clock, not from wall clock second
// boundaries, so the first window is a full second.
type ramp struct {
	start  time.Time // recovery instant (tracker clock)
	window int64     // index of the current one-second window
	used   int64     // tunnels admitted in the current window
	// refused says a caller was refused and not yet woken; refusedIn is
	// the window of the latest such refusal.
	refused   bool
	refusedIn int64
}

// rampCap is the number of admissions allowed in window k.
func rampCap(rate int, k int64) int64 {
	if k >= 40 {
		return math.MaxInt64
	}
	return int64(rate) << k
}

// startRamp begins slow start at now (unless s disables it) and schedules
// the first window wake. Caller holds r.mu.
func (t *Tracker) startRamp(s *settings, r *Record, now time.Time, e *effects) {
	defer r.publish()
	if s.cfg.SlowStart <= 0 {
		return
	}
	r.ramp = ramp{start: now}
	r.ramping.Store(true)
	e.items = append(e.items, item{at: now.Add(time.Second), rec: r, epoch: r.epoch, kind: kindRamp})
}

// Admit reports whether one new tunnel may start on r now: r is eligible
// and its slow-start ramp (if any) has room in the current second. A true
// answer consumes one slot of the ramp. For an eligible record outside
// slow start it is two atomic loads and takes no lock.
//
// A caller refused by the ramp waits on Changed: Run closes it when the
// next one-second window opens (only if someone was refused), so waiters
// re-try exactly once per window, without polling.
func (t *Tracker) Admit(r *Record) bool {
	if State(r.state.Load()) != Eligible {
		return false
	}
	if !r.ramping.Load() {
		return true
	}
	return t.admitRamp(r)
}

// AdmitTarget is Admit for a tunnel to target (host:port, or a host): it
// also refuses while r has a per-target cooldown for its host, or for
// that host:port (see cooldownKey). The ramp slot is
// consumed only when the answer is true. With no per-target cooldowns on r
// it costs one more atomic load than Admit.
func (t *Tracker) AdmitTarget(r *Record, target string) bool {
	if State(r.state.Load()) != Eligible {
		return false
	}
	if target != "" && r.ntargets.Load() > 0 && cooling(t.targetCooling(r, target)) {
		return false
	}
	if !r.ramping.Load() {
		return true
	}
	return t.admitRamp(r)
}

func (t *Tracker) admitRamp(r *Record) bool {
	now := t.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if State(r.state.Load()) != Eligible {
		return false
	}
	if !r.ramping.Load() {
		return true
	}
	s := t.settings()
	el := now.Sub(r.ramp.start)
	if el >= s.cfg.SlowStart {
		r.ramping.Store(false)
		r.publish()
		return true
	}
	k := int64(max(el, 0) / time.Second)
	if k != r.ramp.window {
		r.ramp.window, r.ramp.used = k, 0
	}
	if r.ramp.used < rampCap(s.cfg.SlowStartRate, k) {
		r.ramp.used++
		return true
	}
	r.ramp.refused, r.ramp.refusedIn = true, k
	return false
}

// rampWake handles a kindRamp item due at it.at, the start of a window:
// wake waiters refused in an earlier window, and schedule the next window
// start (or the ramp's end) while the ramp lasts.
func (t *Tracker) rampWake(r *Record, it item) (wake bool, next *item) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed || it.epoch != r.epoch {
		return false, nil // a transition since; into eligible broadcasts itself
	}
	slow := t.settings().cfg.SlowStart
	el := it.at.Sub(r.ramp.start)
	if r.ramp.refused && (el >= slow || r.ramp.refusedIn < int64(el/time.Second)) {
		wake, r.ramp.refused = true, false
	}
	if el >= slow {
		r.ramping.Store(false)
		r.publish()
		return wake, nil
	}
	at := it.at.Add(time.Second)
	if end := r.ramp.start.Add(slow); end.Before(at) {
		at = end
	}
	return wake, &item{at: at, rec: r, epoch: it.epoch, kind: kindRamp}
}
