package health

import (
	"fmt"
	"time"
)

// Snapshot is a point-in-time copy of a record, for the admin API, metrics
// and the state file. Times are wall clock; zero means none.
type Snapshot struct {
	Key  string
	Name string
	// State is the state as of the snapshot: a cooling record whose
	// deadline passed reads probe_allowed.
	State       State
	Reason      Class     // class of the last failure (or operator); kept after recovery
	Stage       Stage     // stage of the last failure
	Detail      string    // detail of the last failure
	Until       time.Time // wall-clock end of cooling; zero when not cooling
	Failures    map[Class]uint64
	Stages      map[Stage]uint64
	Counts      []FailureCount // failures by class and stage, non-zero only
	Successes   uint64
	LastSuccess time.Time
	Streak      int // coolings without a passing probe in between
	// Probing is true while a probe of the record is in flight.
	Probing      bool
	ProbesOK     uint64
	ProbesFailed uint64
	LastProbe    time.Time
	// SlowStart is true while the record is in its slow-start ramp.
	SlowStart bool
	History   []Transition
	// Targets lists the per-target cooldowns active now, by end time.
	Targets []TargetCooldown
	// TargetDrops counts per-target cooldowns dropped because the record
	// had Config.MaxTargets of them.
	TargetDrops uint64
}

// FailureCount is the number of failures of one class at one stage.
type FailureCount struct {
	Class Class
	Stage Stage
	N     uint64
}

// Transition is one history entry.
type Transition struct {
	At     time.Time // wall clock
	From   State
	To     State
	Reason Class
	Stage  Stage
	Detail string
	// Target is set on a per-target cooldown entry (From == To): the
	// record cooled for that host (or host:port, a policy refusal of one
	// port) only.
	Target string
	// Instance names the fleet instance that made the transition on an
	// entry of the fleet's shared history (Detail then already ends with
	// " (instance <name>)"); it is empty on a local entry not shared (yet)
	// and in single-process mode.
	Instance string
	// Foreign marks a shared entry that is another instance's credential
	// failure (its credentials, not this instance's, were rejected; set
	// by package cluster): listed, never shown as the record's last
	// failure.
	Foreign bool
}

// TargetCooldown is a cooldown scoped to one target host, or to one
// host:port for a policy refusal of that port (Failure.Scope ScopePort).
type TargetCooldown struct {
	Host   string // "host", or "host:port"
	Reason Class
	Stage  Stage
	Until  time.Time // wall clock
	Streak int       // coolings of this host in a row
}

// Snapshot returns a copy of r for display.
func (t *Tracker) Snapshot(r *Record) Snapshot {
	now := t.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snapshot(now, t.settings().cfg.SlowStart)
}

// Status returns r's effective state and the class of its last failure
// without copying the record: the admin API filters a large pool with it
// before rendering only the records it returns.
func (t *Tracker) Status(r *Record) (State, Class) {
	now := t.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.effectiveState(now), r.reason
}

// Stats is the part of a record the metrics read at every scrape: the
// counters, without the history and maps a Snapshot copies.
type Stats struct {
	State        State
	Counts       []FailureCount // non-zero only; appended to the buffer Stats was given
	Successes    uint64
	ProbesOK     uint64
	ProbesFailed uint64
	Targets      int // per-target cooldowns active now
}

// Stats returns r's counters, appending its failure counts to buf (pass
// the previous Stats' Counts[:0] to reuse it across a pool).
func (t *Tracker) Stats(r *Record, buf []FailureCount) Stats {
	now := t.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Stats{State: r.effectiveState(now), Counts: buf, Successes: r.successes.Load(),
		ProbesOK: r.probesOK, ProbesFailed: r.probesFailed}
	if r.failures != nil {
		for c := range numClasses {
			for sg := range numStages {
				if n := r.failures[c][sg]; n > 0 {
					st.Counts = append(st.Counts, FailureCount{Class: c, Stage: sg, N: n})
				}
			}
		}
	}
	for _, tc := range r.targets {
		if now.Before(tc.deadline) {
			st.Targets++
		}
	}
	return st
}

// Export returns a snapshot of every record, sorted by key, for the state
// file and the admin API.
func (t *Tracker) Export() []Snapshot {
	now := t.clock.Now()
	slow := t.settings().cfg.SlowStart
	rs := t.Records()
	out := make([]Snapshot, 0, len(rs))
	for _, r := range rs {
		r.mu.Lock()
		out = append(out, r.snapshot(now, slow))
		r.mu.Unlock()
	}
	return out
}

// snapshot copies r. Caller holds r.mu.
func (r *Record) snapshot(now time.Time, slowStart time.Duration) Snapshot {
	s := Snapshot{
		Key:          r.key,
		Name:         r.name,
		State:        r.effectiveState(now),
		Reason:       r.reason,
		Stage:        r.stage,
		Detail:       r.detail,
		Failures:     map[Class]uint64{},
		Stages:       map[Stage]uint64{},
		Successes:    r.successes.Load(),
		Streak:       r.streak,
		Probing:      r.probing,
		ProbesOK:     r.probesOK,
		ProbesFailed: r.probesFailed,
		LastProbe:    r.lastProbe,
		SlowStart:    r.ramping.Load() && now.Sub(r.ramp.start) < slowStart,
		History:      r.hist.list(),
		TargetDrops:  r.targetDrops,
	}
	if s.State == Cooling {
		s.Until = r.until
	}
	if ns := r.lastSuccess.Load(); ns != 0 {
		s.LastSuccess = time.Unix(0, ns)
	}
	if r.failures != nil {
		for c := range numClasses {
			for st := range numStages {
				if n := r.failures[c][st]; n > 0 {
					s.Failures[c] += n
					s.Stages[st] += n
					s.Counts = append(s.Counts, FailureCount{Class: c, Stage: st, N: n})
				}
			}
		}
	}
	for _, tc := range r.targets {
		if now.Before(tc.deadline) {
			s.Targets = append(s.Targets, TargetCooldown{Host: tc.host, Reason: tc.reason, Stage: tc.stage, Until: tc.until, Streak: tc.streak})
		}
	}
	sortTargets(s.Targets)
	return s
}

// failedBefore tells, for a record known only from a snapshot (a state
// file, the removed set) or from another instance, whether a failure set
// it aside since its last admission, so that its next admission ramps
// (Record.failed): cooling says so; probe_allowed says so when it cooled
// since its last passing probe (a record eligible before a restart comes
// back probe_allowed with no streak, as does a new one); disabled says so
// when it cooled first or permanent_after disabled it (its reason is then
// the failure's, not operator).
func failedBefore(st State, reason Class, streak int) bool {
	switch st {
	case Cooling:
		return true
	case ProbeAllowed:
		return streak > 0
	case Disabled:
		return streak > 0 || (reason != ClassNone && reason != Operator)
	}
	return false
}

// restartRecheckDetail is the detail of the eligible → probe_allowed
// entry a record eligible before a restart gets at its restore.
const restartRecheckDetail = "restart re-check: eligible before the restart, probed before it serves again"

// cooldownEndedAway is the detail of the cooling → probe_allowed entry a
// record gets when its saved cooldown ended before it was restored:
// while rotor was stopped (a state file's restore, detail
// restoredDetail), or while the upstream was out of the config.
func cooldownEndedAway(detail string) string {
	if detail == restoredDetail {
		return "cooldown ended while rotor was stopped"
	}
	return "cooldown ended while out of the config"
}

// Restore applies a persisted snapshot to the existing record for key
// (state_file on start-up, issue 6) and reports whether the record exists.
// Counters, history, streak, last failure and per-target cooldowns are
// replaced by the snapshot's. State:
//
//   - disabled stays disabled, with its reason;
//   - cooling with Until still ahead cools until then: the remaining wall
//     time becomes a deadline on the tracker clock, relative to now;
//   - cooling with Until past, and probe_allowed, become probe_allowed and
//     are probed soon; the cooling one's history gets the cooling →
//     probe_allowed entry of its cooldown's end (cooldownEndedAway), at
//     its saved deadline;
//   - eligible keeps the record's start state (probe_allowed unless
//     Config.StartEligible): it was eligible before the restart, but
//     nothing unverified serves traffic. It did not fail, so once
//     admitted it serves without a slow-start ramp. Its history gets
//     the eligible → probe_allowed entry of that re-check
//     (restartRecheckDetail), so the chain of transitions has no gap.
//
// Any other saved state is given back without a history entry of its own
// (the history is the snapshot's) and logged as "upstream record
// restored"; no restore counts as a transition for the observer.
func (t *Tracker) Restore(key string, s Snapshot) bool {
	r := t.Lookup(key)
	if r == nil {
		return false
	}
	return t.restore(r, s, restoredDetail, false)
}

// restore applies s to r as Restore describes; with keepEligible an
// eligible snapshot makes r eligible again (the upstream that left the
// config moments ago was serving: see Tracker.Add). It reports false when
// r was removed meanwhile.
func (t *Tracker) restore(r *Record, s Snapshot, detail string, keepEligible bool) bool {
	now := t.clock.Now()
	wnow := wall(now)
	st := t.settings()
	maxTargets, pol := st.cfg.MaxTargets, st.policy
	var e effects
	r.mu.Lock()
	if r.removed {
		r.mu.Unlock()
		return false
	}
	r.reason, r.stage, r.detail = s.Reason, s.Stage, truncate(s.Detail, maxDetail)
	r.streak = max(s.Streak, 0)
	r.failed = failedBefore(s.State, s.Reason, r.streak)
	r.successes.Store(s.Successes)
	if !s.LastSuccess.IsZero() {
		r.lastSuccess.Store(s.LastSuccess.UnixNano())
	}
	r.probesOK, r.probesFailed, r.lastProbe = s.ProbesOK, s.ProbesFailed, s.LastProbe
	r.failures = nil
	for _, fc := range s.Counts {
		if fc.Class < numClasses && fc.Stage < numStages && fc.N > 0 {
			r.countFailure(fc.Class, fc.Stage, fc.N)
		}
	}
	if len(s.Counts) == 0 { // a file without the matrix: keep per-class totals
		for c, n := range s.Failures {
			if c < numClasses && n > 0 {
				r.countFailure(c, StageNone, n)
			}
		}
	}
	r.hist.replace(s.History)
	r.targets = nil
	cutTargets := 0
	for _, tc := range s.Targets {
		if left := tc.Until.Sub(wnow); left > 0 && tc.Host != "" && len(r.targets) < maxTargets {
			if r.targets == nil {
				r.targets = map[string]*targetCooldown{}
			}
			until := tc.Until
			if m := pol.For(tc.Reason).Max; left > m {
				left, until = m, wnow.Add(m) // as the record's deadline below
				cutTargets++
			}
			r.targets[tc.Host] = &targetCooldown{host: tc.Host, reason: tc.Reason, stage: tc.Stage,
				deadline: now.Add(left), until: until, set: now, streak: tc.Streak}
			e.items = append(e.items, item{at: now.Add(left), rec: r, kind: kindTarget})
		}
	}
	r.ntargets.Store(int32(len(r.targets)))
	r.publish()

	cur := State(r.state.Load())
	switch left := s.Until.Sub(wnow); {
	case s.State == Disabled:
		if cur != Disabled {
			r.deadline, r.until = time.Time{}, time.Time{}
			t.restoreState(r, now, Disabled, s.Reason, s.Stage, detail, &e)
		}
	case s.State == Cooling && left > 0:
		r.deadline, r.until = now.Add(left), s.Until
		if m := pol.For(s.Reason).Max; left > m {
			// Written by a clock far ahead, or edited: no saved deadline
			// parks an upstream longer than its class's max cooldown
			// (bug: a state file with a deadline five years ahead kept
			// the upstream out for five years).
			r.deadline, r.until = now.Add(m), wnow.Add(m)
			detail += fmt.Sprintf("; its saved deadline %s was %s away, cut to the %s max cooldown", s.Until.Format(time.RFC3339), left.Round(time.Second), s.Reason)
		}
		t.restoreState(r, now, Cooling, s.Reason, s.Stage, detail, &e)
		e.items = append(e.items, item{at: r.deadline, rec: r, epoch: r.epoch, kind: kindProbe})
	case s.State == Eligible && keepEligible:
		if cur != Eligible {
			r.deadline, r.until = time.Time{}, time.Time{}
			t.restoreState(r, now, Eligible, s.Reason, s.Stage, detail, &e)
			r.publish()
		}
	case s.State == Eligible && cur == ProbeAllowed:
		// Eligible before the restart, probed before it serves again:
		// the move is the record's, and its history says so (bug: the
		// saved "… → eligible" was followed by "probe_allowed →
		// eligible", a gap in the chain of transitions). Like the rest
		// of a restore it counts as no transition and is not shared; it
		// gets no line of its own either (a pool of 20,000 eligible
		// upstreams would log 20,000 at start-up): the caller's summary
		// of the restore covers it.
		r.hist.add(Transition{At: wnow, From: Eligible, To: ProbeAllowed, Reason: ClassNone, Stage: StageProbe,
			Detail: restartRecheckDetail})
	case s.State == Cooling || s.State == ProbeAllowed:
		if s.State == Cooling {
			// Its cooldown ended while nobody watched: the history says
			// so, at the saved deadline (bug: "eligible → cooling" was
			// followed by "probe_allowed → cooling", a gap in the chain).
			// Like the eligible re-check above, it is no transition of
			// this instance's and is not shared.
			// The restore gets its line as a cooling one does, whatever
			// state the record started in.
			at := s.Until
			if at.IsZero() || at.After(wnow) {
				at = wnow
			}
			ended := cooldownEndedAway(detail)
			r.hist.add(Transition{At: at, From: Cooling, To: ProbeAllowed, Reason: s.Reason, Stage: s.Stage, Detail: ended})
			detail += "; " + ended
		}
		if cur != ProbeAllowed || s.State == Cooling {
			r.deadline, r.until = time.Time{}, time.Time{}
			t.restoreState(r, now, ProbeAllowed, s.Reason, s.Stage, detail, &e)
			e.items = append(e.items, item{at: now, rec: r, epoch: r.epoch, kind: kindProbe})
		}
	}
	name := r.name
	r.mu.Unlock()
	t.version.Add(1)
	t.apply(&e)
	if cutTargets > 0 {
		t.log.Info().Str("upstream", name).Int("targets", cutTargets).
			Msg("saved per-target cooldowns further away than their class's max cooldown were cut to it")
	}
	return true
}
