package health

import (
	"context"
	"time"
)

// Fleet mode (issue 10): several rotor instances share their records
// through an external store (package cluster, on Redis). The tracker stays
// the only owner of the state machine; fleet mode adds three seams:
//
//   - a FleetHook told about every substantive local transition (to
//     cooling, eligible, disabled, and an operator's enable), outside every
//     lock, so that it can be shared;
//   - ApplyRemote, which applies a transition made by another instance
//     without publishing it again (no echo loops);
//   - a ProbeGate the prober asks before starting a probe, so that one
//     instance probes an endpoint per cooldown.
//
// Deadlines stay on the tracker clock (monotonic); what crosses to the
// fleet is wall clock (RemoteState.Until, RemoteState.At). A cooldown that
// merely ran out (cooling → probe_allowed) is not shared: every instance
// derives it from the shared Until, and publishing it could overwrite a
// newer "eligible" written by the instance that probed.

// RemoteState is one shared transition of a record: the record's state
// after it and the fields every instance shows. Times are wall clock,
// never a monotonic reading.
type RemoteState struct {
	Key    string
	State  State
	From   State
	Reason Class
	Stage  Stage
	Detail string
	// Until is the wall-clock end of cooling; zero unless State is Cooling.
	Until time.Time
	// Streak is the cooldown streak after the transition.
	Streak int
	// At is the wall-clock time of the transition.
	At time.Time
	// Instance names the instance that made the transition (set by the
	// fleet store; informational).
	Instance string
	// OpAt is the wall-clock time of the newest operator action (an admin
	// or config disable or enable) the shared record knows; zero when it
	// knows none. A remote automatic transition ends a local operator's
	// disable only when OpAt is after that disable (ApplyRemote).
	OpAt time.Time
	// History, when non-empty, replaces the record's history (the fleet's
	// shared recent history, oldest first; bounded by Config.HistoryLen),
	// but for what the store lost (HistoryBound).
	History []Transition
	// HistoryBound is how many entries the store's history holds at most
	// (0: History is taken whole). A History with fewer entries than that,
	// lacking entries of this record that came from the store (Instance
	// set) and are older than History's oldest, lost them: a store that
	// restarted empty holds only what was written since. Those entries are
	// kept before History (HistoryBound in all), so that the instance puts
	// them back (Shared). Bug: an instance's own first write into an empty
	// store, or another's applied first, replaced the history with that
	// one entry before it was put back, and the history from before the
	// outage was gone fleet-wide.
	HistoryBound int
}

// FleetHook receives the local transitions to share. Publish is called
// outside every lock from the goroutine that caused the transition (often a
// client connection), so it must not block: queue and return.
type FleetHook interface {
	Publish(rs RemoteState)
}

// ProbeGate decides which instance probes an endpoint. TryProbe is called
// from the probe goroutine (never under a lock and never on Run's loop)
// before a probe of the record key starts. ok false means another instance
// owns the probe: the tracker asks again after the retry interval given to
// SetFleet, unless a remote transition moved the record on meanwhile. When
// ok, release is called once the probe's outcome has been applied (and
// handed to the FleetHook); a probe abandoned because Run stopped does not
// call it, so its lease runs out as if the instance had died.
type ProbeGate interface {
	TryProbe(key string) (release func(), ok bool)
}

// fleetHooks is what SetFleet installs.
type fleetHooks struct {
	hook  FleetHook
	gate  ProbeGate
	retry time.Duration
}

// SetFleet installs fleet mode: hook receives local transitions, gate (nil:
// none) is asked before each probe, and retry (default 1s) is how long a
// record whose probe another instance owns waits before asking again. Call
// it before Add and Run; a nil hook turns fleet mode off.
func (t *Tracker) SetFleet(hook FleetHook, gate ProbeGate, retry time.Duration) {
	if hook == nil {
		t.fleet.Store(nil)
		return
	}
	if retry <= 0 {
		retry = time.Second
	}
	t.fleet.Store(&fleetHooks{hook: hook, gate: gate, retry: retry})
}

// restoredDetail is the detail of a state-file restore's transition.
const restoredDetail = "restored from state file"

// shared reports whether tr is a transition the fleet shares: not a
// cooldown that ran out, a state-file restore (every instance derives or
// holds those itself) or a per-target cooldown (local).
func (tr Transition) shared() bool {
	return tr.Target == "" && !(tr.To == ProbeAllowed && tr.Stage != StageOperator) && tr.Detail != restoredDetail
}

// sharedState builds the fleet record of r after transition tr, or nil
// when tr is local-only (Transition.shared). Caller holds r.mu.
func sharedState(r *Record, tr Transition) *RemoteState {
	if !tr.shared() {
		return nil
	}
	return &RemoteState{
		Key: r.key, State: tr.To, From: tr.From, Reason: tr.Reason, Stage: tr.Stage,
		Detail: tr.Detail, Until: r.until, Streak: r.streak, At: tr.At,
	}
}

// publishFleet hands rs to the fleet hook, if any. Called outside locks.
func (t *Tracker) publishFleet(rs RemoteState) {
	if f := t.fleet.Load(); f != nil {
		f.hook.Publish(rs)
	}
}

// Shared returns what the fleet's store should hold for the record key,
// for an instance that puts back what a store that restarted empty lost:
// the record's last shared transition (its own, or one applied from the
// fleet, with the instance that made it) as it was published, with the
// shared part of its history (oldest first; Transition.Instance names the
// instance of each entry applied from the fleet). ok is false when the
// record is unknown or has made no shared transition that matches its
// state (a fresh record: nothing to put back).
func (t *Tracker) Shared(key string) (rs RemoteState, ok bool) {
	r := t.Lookup(key)
	if r == nil {
		return rs, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removed {
		return rs, false
	}
	all := r.hist.list()
	hist := all[:0]
	for _, tr := range all {
		if tr.shared() {
			hist = append(hist, tr)
		}
	}
	if len(hist) == 0 {
		return rs, false
	}
	last := hist[len(hist)-1]
	cur := State(r.state.Load())
	// A cooling record whose cooldown ran out is probe_allowed here and
	// cooling (with an Until in the past) in the store.
	if last.To != cur && !(last.To == Cooling && cur == ProbeAllowed) {
		return rs, false
	}
	rs = RemoteState{Key: r.key, State: last.To, From: last.From, Reason: last.Reason, Stage: last.Stage,
		Detail: last.Detail, Streak: r.streak, At: last.At, Instance: last.Instance, History: hist}
	if last.To == Cooling {
		rs.Until = r.until
	}
	return rs, true
}

// ApplyRemote applies a transition another instance made to the record
// key, without publishing it again, and reports whether the record exists.
// wnow-relative: a cooling Until ahead of this instance's wall clock cools
// the record until then (a deadline on the tracker clock, relative to now);
// one already past makes it probe_allowed, as does a remote probe_allowed
// (an operator's enable): the probe gate then decides who probes. A remote
// eligible (a probe passed elsewhere) re-admits the record with a new
// streak, and with slow start when it had failed (readmit). A remote
// disabled disables it with the remote reason. A transition to the state
// the record is already in (same Until when cooling) changes nothing but
// the history. The history entry is bounded like a local one;
// rs.History, when set, replaces the history. A record the config
// disables keeps its state (the config has the last word on disabled) and
// takes the history only. An automatic transition (anything but an
// operator's disable or enable) never ends an operator's disable, local
// or applied from the fleet, unless rs.OpAt shows the shared record knows
// a newer operator action (an enable this instance missed): the fleet's
// store holds the same rule, and a remote failure that raced with a local
// disable must not cool the record the operator just disabled.
func (t *Tracker) ApplyRemote(key string, rs RemoteState) bool {
	r := t.Lookup(key)
	if r == nil {
		return false
	}
	now := t.clock.Now()
	wnow := wall(now)
	s := t.settings()
	e := effects{remote: true}
	detail := truncate(rs.Detail, maxDetail)
	if rs.Instance != "" {
		detail = truncate(detail+" (instance "+rs.Instance+")", maxDetail)
	}
	r.mu.Lock()
	if r.removed {
		r.mu.Unlock()
		return false
	}
	if r.configDisabled {
		// The config has the last word on disabled: only the config
		// changing (Add) enables the record, not the fleet's record. The
		// shared history is still merged (bug: it fell behind here).
		if len(rs.History) > 0 {
			r.hist.replace(keepLost(r.hist.list(), rs.History, rs.HistoryBound))
		}
		r.mu.Unlock()
		t.version.Add(1)
		return true
	}
	cur := State(r.state.Load())
	opAction := rs.Stage == StageOperator && (rs.State == Disabled || rs.State == ProbeAllowed)
	if cur == Disabled && r.stage == StageOperator && !opAction && !rs.OpAt.After(r.opAt) {
		r.mu.Unlock()
		return true
	}
	left := rs.Until.Sub(wnow)
	to := rs.State
	if to == Cooling && left <= 0 {
		to = ProbeAllowed
	}
	// The shared until has milliseconds; r's, set here, nanoseconds (bug:
	// an instance re-applied its own cooling at every resync after a
	// reload, logging it as a change).
	same := cur == to && (to != Cooling || r.until.UnixMilli() == rs.Until.UnixMilli())
	if !same {
		if to != Eligible { // a recovered record keeps its last failure
			r.reason, r.stage, r.detail = rs.Reason, rs.Stage, detail
			r.streak = max(rs.Streak, 0)
			r.failed = r.failed || failedBefore(to, rs.Reason, r.streak)
		}
		switch to {
		case Cooling:
			r.after = [numClasses]int{}
			r.deadline, r.until = now.Add(left), rs.Until
			t.setState(r, now, Cooling, rs.Reason, rs.Stage, detail, nil, &e)
			e.items = append(e.items, item{at: r.deadline, rec: r, epoch: r.epoch, kind: kindProbe})
		case ProbeAllowed:
			r.deadline, r.until = time.Time{}, time.Time{}
			t.setState(r, now, ProbeAllowed, rs.Reason, rs.Stage, detail, nil, &e)
			e.items = append(e.items, item{at: now, rec: r, epoch: r.epoch, kind: kindProbe})
		case Eligible:
			t.readmit(s, r, now, detail, &e)
		case Disabled:
			r.deadline, r.until = time.Time{}, time.Time{}
			t.setState(r, now, Disabled, rs.Reason, rs.Stage, detail, nil, &e)
		}
	}
	if to == Disabled && rs.Stage == StageOperator && (!same || rs.At.After(r.opAt)) {
		r.opAt = wall(rs.At)
	}
	if len(rs.History) > 0 {
		h := keepLost(r.hist.list(), rs.History, rs.HistoryBound)
		r.hist.replace(h)
		r.showLastFailure(h)
	}
	r.mu.Unlock()
	t.version.Add(1)
	t.apply(&e)
	return true
}

// showLastFailure sets an eligible r's reason, stage and detail to those
// of its last failure in h, the fleet's shared history: its newest entry
// to cooling or disabled. A local eligible record shows its last failure
// (readmit keeps it; an operator's enable is no failure and leaves it), so
// every instance, the one that made the transitions or one that applied
// them, shows the same for the same shared history (bug: one that applied
// a remote eligible kept its own, possibly none, last failure). Left alone
// when h holds no failure or r is not eligible. Another instance's
// credential failure (Foreign) is no failure of this instance's. Caller
// holds r.mu.
func (r *Record) showLastFailure(h []Transition) {
	if State(r.state.Load()) != Eligible {
		return
	}
	for i := len(h) - 1; i >= 0; i-- {
		if tr := h[i]; tr.Target == "" && !tr.Foreign && (tr.To == Cooling || tr.To == Disabled) {
			r.reason, r.stage, r.detail = tr.Reason, tr.Stage, tr.Detail
			return
		}
	}
}

// gatedProbe runs q's probe when the fleet's probe gate grants it (or
// when there is no gate). Called on the probe goroutine Run owns; the
// record is marked probing by claimProbe. When the probe ends and leaves
// the record probe_allowed (its result was stale, or Run is stopping),
// another is queued for the record's current epoch (ensureProbe), after
// the fleet lease is released (a gate that still finds it held defers the
// new probe by the retry interval).
func (t *Tracker) gatedProbe(ctx context.Context, p *probeSpec, q queued, d Dialer) {
	f := t.fleet.Load()
	if f == nil || f.gate == nil {
		t.runProbe(ctx, p, q, d)
		t.ensureProbe(q.rec, 0)
		return
	}
	release, ok := f.gate.TryProbe(q.rec.key)
	if !ok {
		t.probeDeferred(q, f.retry)
		return
	}
	t.runProbe(ctx, p, q, d)
	if ctx.Err() == nil && release != nil {
		release()
	}
	t.ensureProbe(q.rec, 0)
}

// probeDeferred clears the probing mark of q's record, whose probe another
// instance owns, and asks again after retry while the record is
// probe_allowed. The retry is for the record's current epoch, not q's: a
// transition while the gate was asked (an enable, local or remote) queued
// an item that Run dropped, since the record was still marked probing.
func (t *Tracker) probeDeferred(q queued, retry time.Duration) {
	r := q.rec
	r.mu.Lock()
	r.probing = false
	r.mu.Unlock()
	t.ensureProbe(r, retry)
}

// SetHistory replaces the history of the record key with h (the fleet's
// shared history, oldest first, bounded by Config.HistoryLen), after this
// instance's own transition was written to the shared record, so that
// every instance lists the same history; bound is the store's bound on it
// (RemoteState.HistoryBound: entries the store lost are kept). It reports
// whether the record exists.
func (t *Tracker) SetHistory(key string, h []Transition, bound int) bool {
	r := t.Lookup(key)
	if r == nil || len(h) == 0 {
		return r != nil
	}
	r.mu.Lock()
	if !r.removed {
		h = keepLost(r.hist.list(), h, bound)
		r.hist.replace(h)
		r.showLastFailure(h)
	}
	r.mu.Unlock()
	t.version.Add(1)
	return true
}
