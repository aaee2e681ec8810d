package health

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Record is one upstream's health record. It is a handle: all reads and
// writes go through the Tracker that created it.
//
// Why a mutex per record and not one per tracker: reporting (Success, Fail)
// happens once or twice per tunnel from every connection goroutine, so it
// must scale with cores; contention is then limited to tunnels of the same
// upstream. Why not atomics for everything: a transition changes state,
// reason, stage, deadline, streak and history together and they must be
// read together (STYLE 39). The few atomics below are either mirrors of
// mu-guarded fields, written only under mu, that let the pick path (Admit,
// Eligible) and the common Success path skip the lock, or independent
// counters.
type Record struct {
	key string

	state    atomic.Uint32 // State; mirror of the machine, written under mu
	ramping  atomic.Bool   // slow start active; written under mu
	ntargets atomic.Int32  // len(targets); written under mu
	nfails   atomic.Int32  // len(targetFails); written under mu
	nsilent  atomic.Int32  // len(silences); written under mu
	pending  atomic.Bool   // some failure run is non-zero; written under mu

	successes   atomic.Uint64 // independent counter
	lastSuccess atomic.Int64  // wall clock, Unix nanoseconds; 0 = never
	lastProbeOK atomic.Int64  // wall clock of the last passing probe, Unix nanoseconds; 0 = never

	mu sync.Mutex
	// mu guards the fields below.
	name    string
	dialer  Dialer
	removed bool
	gate    *Gate   // where the admission summary is published (gate.go); nil: nowhere
	roster  *Roster // kept in step with gate (roster.go); nil: none
	member  int     // r's index in roster
	// configDisabled says the record is disabled by its config entry
	// (disabled = true). opHeld says a disable of another kind (an
	// operator's, permanent_after) holds besides it: the config's
	// disabled = false then leaves the record disabled.
	configDisabled, opHeld bool
	// epoch increments on every transition, and when the credentials
	// change under a running probe (CredentialsChanged); probe results
	// and scheduled items carrying an older epoch are stale and dropped
	// (STYLE 42).
	epoch  uint64
	reason Class  // class of the last failure (or operator)
	stage  Stage  // stage of the last failure
	detail string // detail of the last failure
	// opAt is the wall-clock time of the operator's disable that holds r
	// disabled, local or applied from the fleet (zero otherwise): a remote
	// automatic transition ends it only when the shared record knows a
	// newer operator action (ApplyRemote).
	opAt time.Time
	// deadline is the end of cooling on the tracker clock (monotonic in
	// production). It is only ever compared, never formatted.
	deadline time.Time
	// until is deadline's wall-clock equivalent, computed once at the
	// transition, for display and the state file.
	until time.Time
	// streak counts coolings since the last passing probe; it drives the
	// geometric growth of the cooldown.
	streak int
	// failed says a failure set r aside (cooling, or disabled by
	// permanent_after) since it was last admitted: its next admission
	// starts a slow-start ramp (readmit). A record that did not fail (a
	// new one, one an operator disabled while it served, one eligible
	// before a restart) serves at full rate as soon as it is admitted.
	failed bool
	// after counts failures per class since the last success or cooling,
	// for ClassPolicy.After.
	after [numClasses]int
	// consec counts failures per class since the last success or passing
	// probe, for ClassPolicy.PermanentAfter.
	consec       [numClasses]int
	failures     *failureMatrix // nil until the first failure
	probing      bool
	probeNotTill time.Time // monotonic: no probe before (this machine ran out of fds, ports or memory)
	probesOK     uint64
	probesFailed uint64
	lastProbe    time.Time // wall clock
	ramp         ramp
	hist         history
	targets      map[string]*targetCooldown
	targetDrops  uint64
	targetFails  []targetFail // recent target failures, for the target rule
	silences     []targetFail // recent first-byte silences of tunnels, for the silence rule
}

// failureMatrix counts failures by class and stage. A record allocates
// it at its first failure: most records of a large pool never fail.
type failureMatrix [numClasses][numStages]uint64

// countFailure adds n failures of class c at stage st. Caller holds r.mu.
func (r *Record) countFailure(c Class, st Stage, n uint64) {
	if r.failures == nil {
		r.failures = new(failureMatrix)
	}
	r.failures[c][st] += n
}

func newRecord(key, name string, d Dialer, historyLen int) *Record {
	r := &Record{key: key, name: name, dialer: d}
	r.hist.init(historyLen)
	return r
}

// Key returns the record's identity key.
func (r *Record) Key() string { return r.key }

// Name returns the record's display name.
func (r *Record) Name() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.name
}

// effectiveState is the state as of now: a cooling record whose deadline
// passed reads as probe_allowed even before the prober records the
// transition (STYLE 44). Caller holds r.mu.
func (r *Record) effectiveState(now time.Time) State {
	s := State(r.state.Load())
	if s == Cooling && !now.Before(r.deadline) {
		return ProbeAllowed
	}
	return s
}

// wall strips the monotonic reading, leaving the wall clock for display.
func wall(t time.Time) time.Time { return t.Round(0) }

// change is one transition made under a record's lock; it is logged and
// reported after the lock is released (STYLE 40).
type change struct {
	name  string
	tr    Transition
	until time.Time // wall clock, zero unless cooling
	err   error     // cause, for the log only
	// shared is the record to publish to the fleet (fleet.go); nil when
	// fleet mode is off or the change is local-only.
	shared *RemoteState
	// restored marks a record given back its saved state (restoreState):
	// logged as such, and no transition for the observer's metrics.
	restored bool
	// remote marks a transition another instance made, applied from the
	// fleet (ApplyRemote): logged as adopted, not as this instance's own.
	remote bool
}

// effects collects what a mutator must do once it has unlocked.
type effects struct {
	changes int    // transitions posted to the tracker's outbox (see post)
	items   []item // prober deadlines to schedule
	wake    bool   // broadcast Changed
	// remote marks changes applied from the fleet (ApplyRemote): they are
	// not published again.
	remote bool
}

// setState moves r to `to` and records the transition. Caller holds r.mu.
func (t *Tracker) setState(r *Record, now time.Time, to State, reason Class, stage Stage, detail string, err error, e *effects) {
	tr := t.moveState(r, now, to, reason, stage, detail)
	r.hist.add(tr)
	t.postState(r, change{name: r.name, tr: tr, err: err}, e)
}

// restoreState gives r its saved state (a state file's, or the record of
// an upstream back in the config) without recording a transition: the
// saved history already ends with the one that led there, and the state
// the new record started in was never the upstream's (bug: every restore
// listed "probe_allowed → cooling, stage probe" in the history and in
// rotor_transitions_total, no probe having run). Caller holds r.mu.
func (t *Tracker) restoreState(r *Record, now time.Time, to State, reason Class, stage Stage, detail string, e *effects) {
	tr := t.moveState(r, now, to, reason, stage, detail)
	t.postState(r, change{name: r.name, tr: tr, restored: true}, e)
}

// moveState stores r's new state and returns the transition. Caller holds
// r.mu.
func (t *Tracker) moveState(r *Record, now time.Time, to State, reason Class, stage Stage, detail string) Transition {
	from := State(r.state.Load())
	r.epoch++
	r.state.Store(uint32(to))
	if to != Eligible {
		r.ramping.Store(false)
		r.publish()
	} else {
		r.askGate() // until startRamp has decided the ramp
	}
	return Transition{At: wall(now), From: from, To: to, Reason: reason, Stage: stage, Detail: detail}
}

// postState posts c, r's change of state, with its fleet record and wake.
// Caller holds r.mu.
func (t *Tracker) postState(r *Record, c change, e *effects) {
	tr, to := c.tr, c.tr.To
	if to == Cooling {
		c.until = r.until
	}
	// A restore is not published: the fleet's record of the upstream is
	// newer than what this instance kept (bug: a reload that put an
	// upstream back republished its kept operator disable as a new
	// operator action, undoing an enable made elsewhere meanwhile); the
	// fleet hands this record the shared one (Tracker.Shared, Reconcile).
	if !e.remote && !c.restored && t.fleet.Load() != nil {
		c.shared = sharedState(r, tr)
	}
	c.remote = e.remote
	t.post(c, e)
	if to == Eligible {
		e.wake = true
	}
}

// cool moves r to cooling for class (or to disabled when permanent_after
// is reached) under the policy of s. Caller holds r.mu and has counted the
// failure in consec.
func (t *Tracker) cool(s *settings, r *Record, now time.Time, class Class, stage Stage, detail string, err error, e *effects) {
	r.reason, r.stage, r.detail = class, stage, detail
	r.after = [numClasses]int{}
	r.failed = true
	if pa := s.policy.For(class).PermanentAfter; pa > 0 && r.consec[class] >= pa {
		r.deadline, r.until = time.Time{}, time.Time{}
		t.setState(r, now, Disabled, class, stage, detail, err, e)
		return
	}
	r.streak++
	d := s.policy.Cooldown(class, r.streak, s.rand())
	r.deadline = now.Add(d)
	r.until = wall(now).Add(d)
	t.setState(r, now, Cooling, class, stage, detail, err, e)
	e.items = append(e.items, item{at: r.deadline, rec: r, epoch: r.epoch, kind: kindProbe})
}

// apply performs e after every lock is released: schedule, wake waiters,
// log, notify the observer.
func (t *Tracker) apply(e *effects) {
	if len(e.items) > 0 {
		t.sched.push(e.items...)
		t.kickProber()
	}
	if e.changes > 0 {
		t.version.Add(uint64(e.changes))
	}
	if e.wake {
		t.broadcast()
	}
	if e.changes > 0 {
		t.flush()
	}
}

// post queues c for logging, the observer and the fleet, in the order the
// transitions were made. Caller holds the record's lock, so two changes of
// one record are posted in the order they happened; delivering them from
// each mutator's own list after the unlock could swap them (an operator's
// disable overtaken by the cooling it raced with, and the fleet, which
// keeps the last state published per record, left holding the cooling).
func (t *Tracker) post(c change, e *effects) {
	t.outMu.Lock()
	t.outbox = append(t.outbox, c)
	t.outMu.Unlock()
	e.changes++
}

// flush delivers the posted changes, oldest first, one delivery at a time.
// Called with no record lock held.
func (t *Tracker) flush() {
	t.flushMu.Lock()
	defer t.flushMu.Unlock()
	t.outMu.Lock()
	batch := t.outbox
	t.outbox = nil
	t.outMu.Unlock()
	var obs Observer
	if p := t.observer.Load(); p != nil {
		obs = *p
	}
	for _, c := range batch {
		t.logChange(c)
		if obs != nil && !c.restored {
			obs.Transition(c.name, c.tr)
		}
		if c.shared != nil {
			t.publishFleet(*c.shared)
		}
	}
}

// Epoch returns r's transition epoch. A caller that leases r can pass it
// to FailEpoch when the outcome arrives, so that a failure observed on a
// tunnel opened before r last changed state only counts and never drives
// the new state.
func (t *Tracker) Epoch(r *Record) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.epoch
}

// Success records a successful use of r (a tunnel established, a response
// relayed). It resets r's failure runs (after, permanent_after). It takes
// no lock unless failures are pending.
func (t *Tracker) Success(r *Record) { t.success(r, t.clock.Now()) }

func (t *Tracker) success(r *Record, now time.Time) {
	r.successes.Add(1)
	r.lastSuccess.Store(wall(now).UnixNano())
	if r.pending.Load() {
		r.mu.Lock()
		if State(r.state.Load()) == Eligible {
			r.after = [numClasses]int{}
			r.consec = [numClasses]int{}
			r.pending.Store(false)
		}
		r.mu.Unlock()
	}
}

// SuccessTarget is Success for a tunnel that reached target (host:port;
// a bare host counts for no port). Besides counting, it lets the
// target-failure rule know that r reaches that host:port (see Fail), it
// restarts the cooldown streak of an expired per-target cooldown for its
// host or its host:port that r reaching it disproves (a refusal, not a
// ban nor a silence: see clearedBy; SuccessServed for a forwarded
// answer), and it answers r's own recent target failure at that
// host:port: r's next failure there is a first one again.
func (t *Tracker) SuccessTarget(r *Record, host string) { t.successTarget(r, host, proofReached) }

// Neutral records an attempt that is neither success nor failure (client
// cancelled). It exists so callers report every outcome explicitly.
func (t *Tracker) Neutral(r *Record) {}

// Fail records a classified failure on r and applies the cooldown policy.
// A nil f is ignored; ClassNone counts as upstream_error.
//
// Every failure is counted (per class, per stage). Only failures reported
// while r is eligible drive the machine; failures of tunnels that were
// already open when r cooled are counted and otherwise ignored. A
// target-scoped failure (below) applies its per-host cooldown in any
// state: it changes nothing but that host's entry.
//
//   - Target failures (target_unreachable, target_timeout) never cool r
//     whole on their own. The target-failure rule: when r reports target failures
//     for Config.TargetRuleHosts (2) distinct hosts within
//     Config.TargetRuleWindow (60s) and other records reported
//     SuccessTarget for each of those host:ports at or after r's first
//     failure there (so an outage of the hosts themselves cools no one),
//     r is the problem (a
//     proxy claiming that sites others reach are down) and it cools as
//     upstream_error at stage target_connect. A target failure at a
//     host:port that another record reached since r's earlier failure
//     there (within the window, and r did not reach it itself since)
//     cools r for that host:port only, as
//     upstream_error at the failure's stage (see OthersReached, which the
//     attempt loop calls when its next upstream reaches it at once).
//   - A tunnel's first-byte silence (slow_body at first_byte with Scope
//     ScopeTarget) cools r for that host only, and r whole only on
//     evidence that the silence is r's: silent at TargetRuleHosts hosts
//     that answer through other records, or again at a host:port that
//     answered through another since (see silence.go, Answered).
//   - A failure with Target set whose class has scope "target"
//     (Config.ScopeTargetHTTPError, Config.ScopeSlowBody) cools r for that
//     host only; see AdmitTarget.
//   - A refusal of one destination (Failure.Scope ScopeTarget: SOCKS5
//     reply 1 or 8) cools r for that host only, a policy refusal
//     (ScopePort: CONNECT 403, SOCKS5 reply 2) for that host:port only;
//     both count towards the target-failure rule above.
//   - Otherwise, the after-th consecutive failure of a class cools r for
//     Policy.Cooldown(class, streak); the permanent_after-th disables it.
func (t *Tracker) Fail(r *Record, f *Failure) { t.fail(r, f, 0, failLive) }

// FailEpoch is Fail for an outcome of a lease taken at epoch (see Epoch):
// when r changed state since, the failure is only counted.
func (t *Tracker) FailEpoch(r *Record, epoch uint64, f *Failure) { t.fail(r, f, epoch, failEpoch) }

// FailStale is Fail for an outcome that no longer describes r's upstream
// as configured, such as a dial with credentials a reload has since
// replaced: the failure is only counted.
func (t *Tracker) FailStale(r *Record, f *Failure) { t.fail(r, f, 0, failCount) }

// failMode says whether a failure may drive the machine (see fail).
type failMode uint8

const (
	failLive  failMode = iota // while r is eligible (Fail)
	failEpoch                 // while r is eligible at the given epoch (FailEpoch)
	failCount                 // never: counted only (FailStale)
	// failReached is failLive for the cooling of a target failure that
	// another record's success set off (OthersReached): it is no new
	// failure at the target, so the table of recent successes does not
	// take it for one (a retry decision after it would weigh the others'
	// success as older than a failure that never happened).
	failReached
)

func (t *Tracker) fail(r *Record, f *Failure, epoch uint64, mode failMode) {
	if f == nil {
		return
	}
	class := f.Class
	if class == ClassNone || class >= numClasses {
		class = UpstreamError
	}
	stage := f.Stage
	if stage >= numStages {
		stage = StageNone
	}
	now := t.clock.Now()
	s := t.settings()
	var e effects
	r.mu.Lock()
	r.countFailure(class, stage, 1)
	live := State(r.state.Load()) == Eligible && !r.removed && mode != failCount && (mode != failEpoch || epoch == r.epoch)
	observed := mode != failReached // a failure seen at the target now
	// A failure for one host cools r for that host whatever r's own state
	// (cooling, being probed, disabled, or changed since the lease): the
	// host's ban does not depend on it, and r serves again once it is
	// back. It used to be only counted when r was out, so a ban reported
	// while r cooled was lost and r, re-admitted, served the host that had
	// banned it. Only the state-driving part (the target rule, the
	// record's own cooldown) needs r live.
	scoped := !r.removed && mode != failCount && f.Target != ""
	switch {
	case class == Operator:
	case class.IsTargetFailure():
		if live && t.targetRule(s, r, now, f.Target, observed, &e) {
			// Another record reached this host:port since r's earlier
			// failure there: r cools for it (see OthersReached).
			of := othersReach(f)
			r.countFailure(UpstreamError, stage, 1)
			t.coolTarget(s, r, now, UpstreamError, stage, of.Target, detailOf(of.Err), of.Err, &e)
		}
	case scoped && silentAtTarget(f):
		// A tunnel's target sent nothing: the host's, unless the evidence
		// says r's (silence.go).
		t.silent(s, r, now, f, live, observed, &e)
	case scoped && scopedToTarget(f):
		// A refusal of one destination: that host (or host:port) only,
		// unless the upstream refuses hosts that others reach (the
		// target rule, while r is live).
		t.coolTarget(s, r, now, class, stage, cooldownKey(f), detailOf(f.Err), f.Err, &e)
		if live {
			t.targetRule(s, r, now, f.Target, observed, &e)
		}
	case scoped && s.scope(class) == ScopeTarget:
		t.coolTarget(s, r, now, class, stage, targetHost(f.Target), detailOf(f.Err), f.Err, &e)
	case !live:
	default:
		pol := s.policy.For(class)
		r.after[class]++
		r.consec[class]++
		r.pending.Store(true)
		if r.after[class] >= pol.After || pol.PermanentAfter > 0 && r.consec[class] >= pol.PermanentAfter {
			t.cool(s, r, now, class, stage, detailOf(f.Err), f.Err, &e)
		}
	}
	r.mu.Unlock()
	t.apply(&e)
}

// scope returns the configured scope of class.
func (s *settings) scope(c Class) Scope {
	switch c {
	case TargetHTTPError:
		return s.cfg.ScopeTargetHTTPError
	case SlowBody:
		return s.cfg.ScopeSlowBody
	}
	return ScopeUpstream
}

// maxDetail bounds history details (errors can be long, e.g. TLS chains).
const maxDetail = 256

func detailOf(err error) string {
	if err == nil {
		return ""
	}
	return truncate(err.Error(), maxDetail)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Disable moves r to disabled with reason operator; it stays in the list
// and in Export. detail is kept in the history. Disabling a disabled
// record changes nothing, but for one disabled by the config only:
//
// Both the config (disabled = true) and an operator may hold a record
// disabled, each whatever the other did first: the config's disable of a
// disabled record marks it disabled by the config too (so an operator's
// enable is refused while the entry says so), and an operator's disable
// of a record the config disables is recorded as the operator's (its
// detail and a history entry), so the config's disabled = false later
// leaves it disabled. (Bug: either was a silent no-op: the enable was
// accepted and undone by the next reload, the operator's disable was
// answered 200, kept nothing, and the config's enable ended it.)
func (t *Tracker) Disable(r *Record, detail string) { t.disable(r, detail, false) }

func (t *Tracker) disable(r *Record, detail string, byConfig bool) {
	now := t.clock.Now()
	var e effects
	r.mu.Lock()
	detail = truncate(detail, maxDetail)
	switch {
	case r.removed:
	case State(r.state.Load()) != Disabled:
		r.reason, r.stage, r.detail = Operator, StageOperator, detail
		r.deadline, r.until = time.Time{}, time.Time{}
		r.configDisabled, r.opHeld = byConfig, false
		r.opAt = wall(now)
		t.setState(r, now, Disabled, Operator, StageOperator, detail, nil, &e)
	case byConfig:
		if !r.configDisabled {
			r.configDisabled, r.opHeld = true, true
		}
	case r.configDisabled && !r.opHeld:
		r.opHeld = true
		r.reason, r.stage, r.detail = Operator, StageOperator, detail
		r.opAt = wall(now)
		t.setState(r, now, Disabled, Operator, StageOperator, detail, nil, &e)
	}
	r.mu.Unlock()
	t.apply(&e)
}

// configEnable is the config's disabled = false for a record it disabled:
// the record is enabled unless another disable holds (opHeld).
func (t *Tracker) configEnable(r *Record) {
	r.mu.Lock()
	held := r.opHeld && State(r.state.Load()) == Disabled
	if held {
		r.configDisabled, r.opHeld = false, false
	}
	name := r.name
	r.mu.Unlock()
	if !held {
		_ = t.enableAs(r, "enabled in config", false, true)
		return
	}
	// Bug: nothing said why the record stayed disabled.
	t.log.Info().Str("upstream", name).
		Msg("the config no longer disables it, but an operator's disable from before still holds: enable it through the admin API")
}

// Enable moves a disabled or cooling r to probe_allowed and schedules a
// probe at once; only a passing probe makes it eligible again. It resets
// the permanent_after runs (an operator asked for a fresh try) but not the
// cooldown streak (no probe has passed yet). Enabling a probe_allowed
// record makes sure a probe of it is queued when none runs, and is no
// transition; enabling an eligible record changes nothing. In fleet mode
// either is still an operator action the fleet must know (enabledHere).
//
// A record disabled by its config entry (disabled = true) is not enabled:
// Enable returns ErrDisabledByConfig. The config has the last word on
// disabled (bug: the enable was accepted and the next reload of any part
// of the config disabled the upstream again).
func (t *Tracker) Enable(r *Record) error { return t.enable(r, "enabled by operator", false) }

// ErrDisabledByConfig is Enable's refusal of an upstream its config entry
// disables.
var ErrDisabledByConfig = errors.New("disabled in the config (disabled = true): only the config enables it")

// ErrOperatorHeld marks an ErrDisabledByConfig whose record an operator's
// (or permanent_after's) disable holds too: the config's disabled = false
// leaves it disabled, until an operator enables it.
var ErrOperatorHeld error = operatorHeld{}

type operatorHeld struct{}

func (operatorHeld) Error() string {
	return "disabled in the config (disabled = true) and by an operator's disable from before it"
}

func (operatorHeld) Is(target error) bool { return target == ErrDisabledByConfig }

// CredentialsChanged tells the tracker that r's upstream credentials were
// changed in the config (the record's dialer already uses the new ones). A
// record cooling, or disabled by permanent_after, because the proxy
// rejected the old credentials is probed at once with the new ones (as
// Enable would), instead of waiting out a cooldown the change was meant to
// end. A probe_allowed record whose probe is running uses the old
// credentials in that probe: its result, whatever it is, is discarded (the
// epoch moves on) and the record is probed with the new credentials as
// soon as that probe ends. Other records are left alone: an operator's
// disable stays, and traffic tells about an eligible record.
func (t *Tracker) CredentialsChanged(r *Record) {
	_ = t.enable(r, "credentials changed by a reload (config or upstream list file)", true) // refuses only an operator's enable
}

// enable is Enable; with creds, it is CredentialsChanged: only a record
// set aside for auth_rejected (not by an operator or the config) is
// enabled, and a running probe's result is discarded. byConfig is the
// config's own enable (Add), which ends a disable by the config.
func (t *Tracker) enable(r *Record, detail string, creds bool) error {
	return t.enableAs(r, detail, creds, false)
}

func (t *Tracker) enableAs(r *Record, detail string, creds, byConfig bool) error {
	now := t.clock.Now()
	var e effects
	r.mu.Lock()
	switch s := State(r.state.Load()); {
	case r.removed:
	case s == Disabled && r.configDisabled && !creds && !byConfig:
		held := r.opHeld
		r.mu.Unlock()
		if held {
			return ErrOperatorHeld
		}
		return ErrDisabledByConfig
	case s == ProbeAllowed && r.probing:
		if creds {
			// No transition: the record stays probe_allowed, but the
			// probe in flight is stale (runProbe drops its result) and
			// its end queues one for the new epoch (ensureProbe).
			r.epoch++
		} else {
			t.enabledHere(r, now, detail, &e)
		}
	case s == ProbeAllowed:
		// A probe of r should be queued already (it will dial with
		// the current credentials); make sure of it. A duplicate item
		// is dropped by claimProbe.
		e.items = append(e.items, item{at: now, rec: r, epoch: r.epoch, kind: kindProbe})
		if !creds {
			t.enabledHere(r, now, detail, &e)
		}
	case s != Disabled && s != Cooling:
		if !creds {
			t.enabledHere(r, now, detail, &e)
		}
	case creds && (r.reason != AuthRejected || r.configDisabled):
	default:
		r.consec = [numClasses]int{}
		r.after = [numClasses]int{}
		r.deadline, r.until = time.Time{}, time.Time{}
		r.configDisabled, r.opHeld = false, false
		t.setState(r, now, ProbeAllowed, Operator, StageOperator, detail, nil, &e)
		e.items = append(e.items, item{at: now, rec: r, epoch: r.epoch, kind: kindProbe})
	}
	if !r.removed && !byConfig {
		// Per-host auth_rejected cooldowns (a forwarded request's 407) end
		// with the credentials that earned them, and at an operator's
		// enable (the proxy's users may have been fixed). Bug: r stayed
		// cooling for every host its proxy had answered 407 for, up to
		// auth_rejected's max, while its probe through the same host
		// passed. A target's own bans (403, 429) stay: enabling the
		// upstream changes nothing of what the site thinks of it.
		t.endTargets(r, true)
	}
	r.mu.Unlock()
	t.apply(&e)
	return nil
}

// endTargets drops r's per-host cooldowns: only auth_rejected ones when
// authOnly. Caller holds r.mu.
func (t *Tracker) endTargets(r *Record, authOnly bool) {
	if len(r.targets) == 0 {
		return
	}
	for h, tc := range r.targets {
		if !authOnly || tc.reason == AuthRejected {
			delete(r.targets, h)
		}
	}
	r.ntargets.Store(int32(len(r.targets)))
	r.publish()
}

// enabledHere records, in fleet mode, an operator's enable of r that
// changes no state here (r is eligible or probe_allowed): a history entry
// from its state to the same, and an enable for the fleet (State
// ProbeAllowed, stage operator, From r's state), so that it is ordered
// among operator actions and ends a disable made on another instance, one
// made during a Redis outage included. The fleet's store keeps an
// eligible record eligible (package cluster). Bug: such an enable was
// dropped, and a disable made elsewhere before it won when Redis
// returned. Caller holds r.mu.
func (t *Tracker) enabledHere(r *Record, now time.Time, detail string, e *effects) {
	if t.fleet.Load() == nil || e.remote {
		return
	}
	cur := State(r.state.Load())
	tr := Transition{At: wall(now), From: cur, To: cur, Reason: Operator, Stage: StageOperator, Detail: truncate(detail, maxDetail)}
	r.hist.add(tr)
	t.post(change{name: r.name, tr: tr, shared: &RemoteState{Key: r.key, State: ProbeAllowed, From: cur,
		Reason: Operator, Stage: StageOperator, Detail: tr.Detail, Streak: r.streak, At: tr.At}}, e)
}

// Eligible reports whether r may receive client traffic now. Lock-free. It
// ignores the slow-start ramp and per-target cooldowns; Admit and
// AdmitTarget apply those.
func (t *Tracker) Eligible(r *Record) bool { return State(r.state.Load()) == Eligible }
