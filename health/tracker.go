package health

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

// Dialer is what the prober needs from an upstream: the same dialer client
// traffic uses (proxy handshake and auth included). Errors it returns should
// be *Failure values already classified by the upstream package; others are
// classified by the prober (see classifyProbe).
type Dialer interface {
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// Observer receives events for metrics and the state-file writer. Methods
// are called outside every lock, from the goroutine that caused the event
// (a reporting caller or a probe goroutine), so they must be cheap and safe
// for concurrent use. Counters that can be read at scrape time (failures by
// class and stage, successes, probe totals, per-state counts) are in
// Snapshot and Counts instead.
type Observer interface {
	// Transition is called once per state change of the record named name,
	// and once per per-target cooldown (tr.Target set, From == To).
	Transition(name string, tr Transition)
	// Probe is called when a probe of the record named name finishes
	// (ok: it passed; d: its duration on the tracker clock). Probes
	// abandoned because Run stopped are not reported.
	Probe(name string, ok bool, d time.Duration)
}

// Tracker owns every upstream record of one pool. Safe for concurrent use.
// Records are carried across config reloads inside the Tracker instance
// (STYLE 17), never through package state; SetConfig swaps the settings.
type Tracker struct {
	clock Clock
	log   zerolog.Logger

	// set is the current configuration generation; SetConfig swaps it.
	set atomic.Pointer[settings]

	observer atomic.Pointer[Observer]
	// fleet holds the fleet-mode hooks (fleet.go); nil in single-process
	// mode.
	fleet   atomic.Pointer[fleetHooks]
	version atomic.Uint64
	running atomic.Bool

	// outbox holds transitions made but not yet logged, observed and
	// published (see post); outMu guards it and is taken under record
	// locks, flushMu keeps deliveries in order.
	outMu   sync.Mutex
	outbox  []change
	flushMu sync.Mutex

	// changed is closed and replaced on every transition that may let a
	// waiting client proceed; chMu serialises the replacement.
	changed atomic.Pointer[chan struct{}]
	chMu    sync.Mutex

	// sched holds the prober's deadlines; kick wakes Run when it changed.
	sched scheduler
	kick  chan struct{}

	// seen remembers which records recently reached which target hosts,
	// for the target-failure rule.
	seen targetSeen
	// answered remembers which records' tunnels recently got a byte back
	// from which target hosts, for the silence rule (silence.go): a
	// CONNECT that succeeded says nothing about whether the target speaks.
	answered targetSeen

	mu sync.RWMutex
	// mu guards the fields below.
	records map[string]*Record
	gone    map[string]goneRecord // recently removed records, by key (see Add)
	// forgetAt is when the next kindForget item is due; zero when none is
	// scheduled. Items due later than it may be in the heap too: they
	// only sweep again.
	forgetAt time.Time
}

// goneRecord is what Remove keeps of a record for goneKeep: an upstream
// back in the config by then gets its record back (Add).
type goneRecord struct {
	snap           Snapshot
	configDisabled bool
	at             time.Time // tracker clock; its wall clock is the removal's
	// restarted is set on a record a state file kept across a restart
	// (RestoreRemoved): it comes back as a restored record does, an
	// eligible one probed first.
	restarted bool
}

// goneKeep is how long a removed record is remembered, and goneMax how
// many are at most: a list file caught mid-write, an editor saving a
// config in two writes, or a list generator's bad run takes upstreams out
// for seconds, and their records (cooldowns, operator disables, history,
// eligibility) must not be lost to it. Past goneKeep an upstream that
// returns is new.
const (
	goneKeep = 15 * time.Minute
	goneMax  = 200_000
)

// NewTracker returns a tracker for cfg (copied, defaults filled). A nil
// clock means real time. cfg should have passed Validate; an unusable probe
// URL is treated like an empty one and logged at error by Run. SetConfig
// replaces cfg later.
func NewTracker(cfg Config, clock Clock, log zerolog.Logger) *Tracker {
	if clock == nil {
		clock = RealClock()
	}
	t := &Tracker{
		clock:   clock,
		log:     log,
		kick:    make(chan struct{}, 1),
		records: map[string]*Record{},
		gone:    map[string]goneRecord{},
	}
	t.set.Store(newSettings(cfg))
	ch := make(chan struct{})
	t.changed.Store(&ch)
	t.seen.init()
	t.answered.init()
	return t
}

// Policy returns the resolved cooldown policy now in force.
func (t *Tracker) Policy() Policy { return t.settings().policy }

// SetObserver installs o (nil removes it). Call it before Run and before
// reporting starts; events raised before it are not replayed.
func (t *Tracker) SetObserver(o Observer) {
	if o == nil {
		t.observer.Store(nil)
		return
	}
	t.observer.Store(&o)
}

// Version increments on every transition (including per-target cooldowns),
// Add, Remove and Restore. The state-file writer compares it to decide
// whether a debounced write is due; it never decreases.
func (t *Tracker) Version() uint64 { return t.version.Load() }

// Add returns the record for key, creating it when absent. An existing
// record (a reload that kept the upstream) keeps its state, counters and
// history; its name and dialer are refreshed, and a change of the config's
// disabled flag is applied: disabled = true disables it (unless already
// disabled), and disabled = false enables a record that the config had
// disabled (an operator's Disable survives reloads). New records start in
// probe_allowed (or eligible with Config.StartEligible), or disabled when
// disabled is true. A new probe_allowed record is probed as soon as Run's
// limits allow. key and name must already be free of credentials.
func (t *Tracker) Add(key, name string, d Dialer, disabled bool) *Record {
	t.mu.Lock()
	if r, ok := t.records[key]; ok {
		t.mu.Unlock()
		r.mu.Lock()
		r.name, r.dialer = name, d
		wasConfig := r.configDisabled
		r.mu.Unlock()
		switch {
		case disabled:
			t.disable(r, "disabled in config", true)
		case wasConfig:
			t.configEnable(r)
		}
		return r
	}
	g, back := t.gone[key]
	delete(t.gone, key)
	back = back && t.clock.Now().Sub(g.at) < goneKeep
	s := t.settings()
	r := newRecord(key, name, d, s.cfg.HistoryLen)
	var e effects
	r.mu.Lock()
	// A new record enters its first state directly: no history entry and
	// no log line here; the caller logs what a config load added, as a
	// summary when it is a list of thousands.
	switch {
	case disabled:
		r.state.Store(uint32(Disabled))
		r.reason, r.stage, r.detail = Operator, StageOperator, "disabled in config"
		r.configDisabled = true
	case s.cfg.StartEligible:
		r.state.Store(uint32(Eligible))
		e.wake = true
	default:
		r.state.Store(uint32(ProbeAllowed))
		e.items = append(e.items, item{at: t.clock.Now(), rec: r, epoch: r.epoch, kind: kindProbe})
	}
	r.mu.Unlock()
	t.records[key] = r
	t.mu.Unlock()
	t.version.Add(1)
	t.apply(&e)
	if back {
		t.revive(r, g, disabled)
	}
	return r
}

// revive gives r, just added for an upstream that left the config less
// than goneKeep ago, the record it had: counters, history, per-target
// cooldowns and state (an eligible one serves at once, without a probe:
// leaving the config was not a failure). The config has the last word on
// disabled: disabled in the config now keeps r disabled; a record that was
// disabled by the config and is not any more starts as a new one would,
// keeping only its counters and history.
func (t *Tracker) revive(r *Record, g goneRecord, disabled bool) {
	snap := g.snap
	if disabled || g.configDisabled {
		r.mu.Lock()
		cur := State(r.state.Load())
		reason, stage, detail := r.reason, r.stage, r.detail
		r.mu.Unlock()
		snap.State, snap.Reason, snap.Stage, snap.Detail, snap.Until = cur, reason, stage, detail, time.Time{}
	}
	ago := t.clock.Now().Sub(g.at).Round(time.Second)
	detail := fmt.Sprintf("back in the config %s after its removal: record kept", ago)
	if g.restarted {
		detail = fmt.Sprintf("back in the config %s after its removal, across a restart: record kept", ago)
	}
	t.restore(r, snap, detail, !g.restarted)
}

// Remove drops the record for key (the upstream left the config). It is
// the only way a record disappears. The caller logs it as an operator
// action (a summary when a whole list is replaced); the line here is at
// debug level. A removed record reads as disabled to holders of an old
// snapshot, and any probe still running for it is ignored.
func (t *Tracker) Remove(key string) {
	t.mu.Lock()
	r, ok := t.records[key]
	delete(t.records, key)
	t.mu.Unlock()
	if !ok {
		return
	}
	snap := t.Snapshot(r)
	r.mu.Lock()
	configDisabled := r.configDisabled
	r.removed = true
	r.epoch++
	from := State(r.state.Load())
	r.state.Store(uint32(Disabled))
	r.ramping.Store(false)
	r.publish()
	name := r.name
	r.mu.Unlock()
	t.remember(key, goneRecord{snap: snap, configDisabled: configDisabled, at: t.clock.Now()})
	t.version.Add(1)
	t.log.Debug().Str("upstream", name).Stringer("from", from).
		Str("stage", StageOperator.String()).Msg("upstream removed") // no class: no failure
}

// remember keeps g for key (Remove, RestoreRemoved), dropping what is
// past goneKeep when goneMax is reached, and then arbitrary entries: a
// bound, not an order.
func (t *Tracker) remember(key string, g goneRecord) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.gone) >= goneMax {
		for k, old := range t.gone {
			if now.Sub(old.at) >= goneKeep {
				delete(t.gone, k)
			}
		}
		for k := range t.gone {
			if len(t.gone) < goneMax {
				break
			}
			delete(t.gone, k)
		}
	}
	t.gone[key] = g
	// A record restored from a state file may end before the sweep
	// already scheduled.
	if end := g.at.Add(goneKeep); !t.forgetAt.After(now) || end.Before(t.forgetAt) {
		t.forgetAt = end
		t.sched.push(item{at: end, kind: kindForget})
		t.kickProber()
	}
}

// forget drops the removed records past goneKeep at now (Run, on a
// kindForget item) and schedules the next sweep while any are left.
func (t *Tracker) forget(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var next time.Time
	for k, g := range t.gone {
		switch end := g.at.Add(goneKeep); {
		case !now.Before(end):
			delete(t.gone, k)
		case next.IsZero() || end.Before(next):
			next = end
		}
	}
	switch pending := t.forgetAt.After(now); {
	case !next.IsZero() && (!pending || next.Before(t.forgetAt)):
		t.forgetAt = next
		t.sched.push(item{at: next, kind: kindForget})
	case next.IsZero() && !pending:
		t.forgetAt = time.Time{}
	}
}

// Lookup returns the record for key, or nil.
func (t *Tracker) Lookup(key string) *Record {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.records[key]
}

// Records returns every record, sorted by key.
func (t *Tracker) Records() []*Record {
	t.mu.RLock()
	rs := make([]*Record, 0, len(t.records))
	for _, r := range t.records {
		rs = append(rs, r)
	}
	t.mu.RUnlock()
	slices.SortFunc(rs, func(a, b *Record) int { return strings.Compare(a.key, b.key) })
	return rs
}

// Counts returns how many records are in each state now (every state
// present, zeros included), for the rotor_upstreams{state} gauge.
func (t *Tracker) Counts() map[State]int {
	now := t.clock.Now()
	m := make(map[State]int, numStates)
	for _, s := range AllStates() {
		m[s] = 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, r := range t.records {
		r.mu.Lock()
		m[r.effectiveState(now)]++
		r.mu.Unlock()
	}
	return m
}

// Changed returns a channel closed at the next transition that may let a
// waiting client proceed: a record became eligible, a slow-start window
// opened on a record that refused someone, or a per-target cooldown ended.
// Callers take the channel, re-check Admit, then wait on it (in that order,
// so no wake-up is lost). Ramp and target wake-ups are driven by Run.
func (t *Tracker) Changed() <-chan struct{} { return *t.changed.Load() }

// broadcast wakes every Changed waiter.
func (t *Tracker) broadcast() {
	t.chMu.Lock()
	old := t.changed.Load()
	ch := make(chan struct{})
	t.changed.Store(&ch)
	t.chMu.Unlock()
	close(*old)
}
