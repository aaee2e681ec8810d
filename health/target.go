package health

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Per-target scoped cooldowns (issue 9): a site that bans one exit says
// nothing about that exit's health for other sites, so with scope "target"
// a failure that names its target host cools the record for that host only.
// They are bounded per record (Config.MaxTargets, oldest dropped and
// counted), expire like any other cooldown, grow geometrically per host
// until a success that disproves them (target_proof.go), and are listed
// in Snapshot.Targets while active.
//
// A target is named "host" or "host:port" (Failure.Target, SuccessTarget,
// AdmitTarget). Scoped cooldowns are per host (the port is dropped,
// targetHost), except a policy refusal of one port (Failure.Scope
// ScopePort), which is per host:port: a proxy that refuses CONNECT to port
// 80 by its ACL (stock squid's SSL_ports) still serves port 443 of that
// host. A record's entries are keyed so ("example.com",
// "example.com:80"), and a target is admitted only while neither its
// host's entry nor its host:port's is cooling. The target-failure rule is
// per host:port: a failure counts only when another record reached that
// exact host:port (see targetRule); a target named without a port never
// counts towards it.

// cooldownKey returns the key of the scoped cooldown f starts: its
// target's host:port for a refusal of that port (ScopePort), else its host.
func cooldownKey(f *Failure) string {
	if f.Scope == ScopePort {
		return f.Target
	}
	return targetHost(f.Target)
}

// scopedToTarget reports a failure that cools its upstream for its target
// only, whatever its class's configured scope (see Failure.Scope).
func scopedToTarget(f *Failure) bool { return f.Scope == ScopeTarget || f.Scope == ScopePort }

// targetHost returns the host of a target named "host:port" or
// "[ipv6]:port", or target itself when it has no port ("example.com",
// "::1"). It allocates nothing (AdmitTarget calls it per pick).
func targetHost(target string) string {
	i := strings.LastIndexByte(target, ':')
	switch {
	case i < 0:
		return target
	case target[0] == '[':
		if i > 1 && target[i-1] == ']' {
			return target[1 : i-1]
		}
		return target
	case strings.IndexByte(target[:i], ':') >= 0: // a bare IPv6 literal
		return target
	}
	return target[:i]
}

// targetCooldown is one host's (or host:port's) scoped cooldown on a
// record.
type targetCooldown struct {
	host     string // the key: "host", or "host:port" (see cooldownKey)
	reason   Class
	stage    Stage
	deadline time.Time // tracker clock; compared only
	until    time.Time // wall clock, for display
	set      time.Time // when last cooled or created (tracker clock), for oldest-first dropping
	streak   int       // coolings of this host with no success that disproves them (clearedBy)
	after    int       // failures since the last cooling, for ClassPolicy.After
}

// coolTarget applies a target-scoped failure under the policy of s, to
// the entry of host (a key: see cooldownKey). Caller holds r.mu.
func (t *Tracker) coolTarget(s *settings, r *Record, now time.Time, class Class, stage Stage, host, detail string, err error, e *effects) {
	tc := r.targets[host]
	if tc == nil {
		if r.targets == nil {
			r.targets = map[string]*targetCooldown{}
		}
		if len(r.targets) >= s.cfg.MaxTargets {
			t.dropTargets(s, r, now)
		}
		tc = &targetCooldown{host: host, set: now}
		r.targets[host] = tc
		r.ntargets.Store(int32(len(r.targets)))
		r.publish()
	}
	if now.Before(tc.deadline) {
		return // already cooling for host: a late report of the same ban
	}
	if s.decayed(tc, now) {
		tc.streak, tc.after, tc.set = 0, 0, now
	}
	// The class is known before the entry cools (after > 1): a success
	// that does not disprove it must not drop its count (clearedBy).
	tc.reason, tc.stage = class, stage
	tc.after++
	if tc.after < s.policy.For(class).After {
		return
	}
	tc.after = 0
	tc.streak++
	d := s.policy.Cooldown(class, tc.streak, s.rand())
	tc.set = now
	tc.deadline, tc.until = now.Add(d), wall(now).Add(d)
	st := State(r.state.Load())
	tr := Transition{At: wall(now), From: st, To: st, Reason: class, Stage: stage, Detail: detail, Target: host}
	r.hist.add(tr)
	t.post(change{name: r.name, tr: tr, until: tc.until, err: err}, e)
	e.items = append(e.items, item{at: tc.deadline, rec: r, kind: kindTarget})
}

// dropTargets makes room for one entry under s.cfg.MaxTargets: entries
// idle past their class's max cooldown go first, then the ones cooled
// longest ago. More than one is dropped only when a reload lowered
// MaxTargets below what r holds. Caller holds r.mu.
func (t *Tracker) dropTargets(s *settings, r *Record, now time.Time) {
	var oldest *targetCooldown
	for h, tc := range r.targets {
		if !now.Before(tc.deadline.Add(s.policy.For(tc.reason).Max)) {
			delete(r.targets, h)
			continue
		}
		if oldest == nil || tc.set.Before(oldest.set) {
			oldest = tc
		}
	}
	switch excess := len(r.targets) - s.cfg.MaxTargets + 1; {
	case excess == 1:
		delete(r.targets, oldest.host)
		r.targetDrops++
	case excess > 1:
		byAge := slices.SortedFunc(maps.Values(r.targets), func(a, b *targetCooldown) int { return a.set.Compare(b.set) })
		for _, tc := range byAge[:excess] {
			delete(r.targets, tc.host)
		}
		r.targetDrops += uint64(excess)
	}
	r.ntargets.Store(int32(len(r.targets)))
	r.publish()
}

// TargetCooling reports whether r is cooling for target only (a
// per-target cooldown of its host, or of its host:port when target has a
// port), whatever its own state. For explaining a refusal; the pick path
// uses AdmitTarget.
func (t *Tracker) TargetCooling(r *Record, target string) bool {
	_, ok := t.TargetCoolingReason(r, target)
	return ok
}

// TargetCoolingReason is TargetCooling with the class of that cooldown
// (the host's when both the host and host:port cool), for telling a
// client why: "refused or banned" sent users with a wrong proxy password
// (auth_rejected per host) to look at the target.
func (t *Tracker) TargetCoolingReason(r *Record, target string) (Class, bool) {
	if r.ntargets.Load() == 0 {
		return 0, false
	}
	return t.targetCooling(r, target)
}

// targetCooling reports whether r is cooling for target's host, or for
// target itself when it has a port, now, and for which class.
func (t *Tracker) targetCooling(r *Record, target string) (Class, bool) {
	now := t.clock.Now()
	host := targetHost(target)
	r.mu.Lock()
	defer r.mu.Unlock()
	if tc := r.targets[host]; tc != nil && now.Before(tc.deadline) {
		return tc.reason, true
	}
	if host == target {
		return 0, false
	}
	if tc := r.targets[target]; tc != nil && now.Before(tc.deadline) {
		return tc.reason, true
	}
	return 0, false
}

// forgetTarget drops the expired entries of target's host and of target
// (a host:port) that p, a success for it, disproves (endStreaks: their
// streaks restart).
//
// It also drops r's recent target failure at target itself (another port
// of the host is another target): r reached it, so that failure was
// passing and no longer counts towards the target-failure rule, nor as
// the earlier failure that cools r for target when others reach it (bug:
// it was kept for the rule's window, so r's next failure there cooled it
// for target at once, counting on from a failure r had answered itself).
// Failures older than win are dropped too, so that successes take no lock
// once r's failures are that old.
func (t *Tracker) forgetTarget(s *settings, r *Record, target string, now time.Time, p proof) {
	win := s.cfg.TargetRuleWindow
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.targetFails) > 0 {
		r.targetFails = slices.DeleteFunc(r.targetFails, func(f targetFail) bool {
			return f.target == target || now.Sub(f.at) >= win
		})
		r.nfails.Store(int32(len(r.targetFails)))
	}
	endStreaks(s, r, target, now, p)
}

// targetFail is one recent target failure reported on a record.
type targetFail struct {
	target string // host:port
	// at is the first failure for target within the rule's window: the
	// evidence that counts is another record reaching target since.
	at time.Time
}

// maxTargetFails bounds the recent target failures a record remembers.
const maxTargetFails = 32

// targetRule records a target failure for target and cools r when the
// target-failure rule of s holds (see Fail). Caller holds r.mu.
//
// "Other upstreams reach it" means another record reported SuccessTarget
// for the very same host:port at or after r's first failure for it within
// the window: a healthy upstream that reports a closed port (REP 5) or a
// silent one is telling the truth, and port 80 reached by others says
// nothing about port 27098 (issue: any client could cool every upstream
// with two requests to closed ports of hosts others reach). A success from
// before r's failure says only that the host was up then: counting those
// cooled healthy upstreams across the pool when two hosts went down
// together (issue: 5 upstreams, two targets served, then killed, and 3 of
// the 5 cooled), so an outage of the hosts themselves never counts, and
// neither does a port closed after it was reached. A target named without
// a port never counts. Refused targets do count when others reach that
// host:port after r's refusal: the port is open, and this upstream is the
// one that cannot get through (an egress firewall answering REJECT looks
// exactly like that). The hosts are counted, not the host:ports: a site
// that blocks this exit on both its ports is one site.
//
// The rule is weighed at r's failures only (SuccessTarget stays cheap), so
// a proxy that fails hosts others reach later cools at its next target
// failure in the window. The cooling counts as one upstream_error failure
// at target_connect, besides the target failure that set it off: it is
// the record's reason and stage, and failures, failures_by_stage and the
// failure metrics (read from Stats) show it as any other cooling.
//
// A failure r answered itself, reaching that host:port later, no longer
// counts for either (forgetTarget drops it).
//
// It reports whether another record reached target itself since r's
// earlier failure there within the window (a failure before this one):
// r fails a host:port that others reach, and the caller cools r for that
// host:port only (see OthersReached), whether or not the rule cooled it
// whole, and also when Config.TargetRuleHosts disables the rule. The
// lookups are the rule's own: nothing more is read for it. observed is
// false for a failure that is no new observation at the target (see
// failReached): the table of recent successes is not told of it.
func (t *Tracker) targetRule(s *settings, r *Record, now time.Time, target string, observed bool, e *effects) (reached bool) {
	if targetHost(target) == target { // no port
		return false
	}
	if observed {
		// The next success for target by anyone is the evidence; make
		// sure the table notes it (also without the rule:
		// ReachedElsewhere reads it).
		t.seen.fail(target, r, now)
	}
	keep, n, reached := noteTargetFail(r.targetFails, target, now, s.cfg.TargetRuleWindow, &t.seen, r)
	r.targetFails = keep
	r.nfails.Store(int32(len(keep)))
	if s.cfg.TargetRuleHosts < 0 || n < s.cfg.TargetRuleHosts {
		return reached
	}
	r.targetFails = nil
	r.nfails.Store(0)
	r.countFailure(UpstreamError, StageTargetConnect, 1)
	r.consec[UpstreamError]++
	r.pending.Store(true)
	detail := fmt.Sprintf("target failures for %d hosts that other upstreams reach at the same port", n)
	t.cool(s, r, now, UpstreamError, StageTargetConnect, detail, errors.New(detail), e)
	return reached
}

// ReachedElsewhere reports whether a record that skip does not name (nil:
// any record) reached target, a host:port, within the target-failure
// rule's window (Config.TargetRuleWindow) before now, and since the
// latest target failure such a record reported for it. The attempt loop
// asks it when an attempt failed at the target, skipping the records the
// request tried: then the target answers others, and the request is tried
// on another upstream instead of failing. A success from before another
// upstream failed there does not count: when the target itself goes
// down, the first request to meet it tries its max_attempts (its own
// failures are skipped), and the requests after it are not retried (each
// try would cost the client another attempt, a timeout perhaps, for a
// target that answers nobody). A target without a port never counts.
//
// One lookup in the table of recent successes; nothing is written. Call
// it on a target failure only.
func (t *Tracker) ReachedElsewhere(target string, skip func(*Record) bool) bool {
	if targetHost(target) == target {
		return false
	}
	return t.seen.reachedElsewhere(target, t.clock.Now(), t.settings().cfg.TargetRuleWindow, skip)
}

// OthersReached records that another record reached f.Target, a
// host:port, after r failed there with f, a target failure (the attempt
// loop's next upstream served the same request): r is the one that cannot
// get there (a TLS front whose proxy hangs, a firewalled exit, a proxy
// that closes without answering), so it cools for that host:port only,
// as upstream_error at f's stage with a detail saying that others reach
// it. It keeps serving other targets, and no client can cool it whole by
// its choice of target; the target-failure rule, weighed again here,
// cools it whole once it fails that way at two hosts. Any other f is
// ignored.
func (t *Tracker) OthersReached(r *Record, f *Failure) {
	if f == nil || !f.Class.IsTargetFailure() || targetHost(f.Target) == f.Target {
		return
	}
	// Not while the target failed for another record within the window:
	// it flaps or just came back, for everyone (as targetRule weighs it).
	if t.seen.failedByOther(f.Target, r, t.clock.Now().Add(-t.settings().cfg.TargetRuleWindow)) {
		return
	}
	t.fail(r, othersReach(f), 0, failReached)
}

// othersReach is the per-host:port failure of r for f, a target failure at
// a host:port other records reach (see OthersReached).
func othersReach(f *Failure) *Failure {
	why := f.Class.String() + " at " + f.Stage.String()
	if f.Err != nil {
		why += ": " + f.Err.Error()
	}
	return &Failure{Class: UpstreamError, Stage: f.Stage, Target: f.Target, Scope: ScopePort,
		Err: fmt.Errorf("other upstreams reach %s (here: %s)", f.Target, why)}
}

// SucceededWithin reports whether r reported a success (Success,
// SuccessTarget) or passed a probe within d before now: the upstream
// proved alive lately.
// Lock-free.
func (t *Tracker) SucceededWithin(r *Record, d time.Duration) bool {
	ns := max(r.lastSuccess.Load(), r.lastProbeOK.Load()) // a passing probe went through it too
	return ns != 0 && wall(t.clock.Now()).Sub(time.Unix(0, ns)) < d
}

// targetSeen remembers, per target host, two records that recently
// reported SuccessTarget for it (distinct records, the last one noted
// first), so "did another record reach this host since" is one lookup.
//
// SuccessTarget runs for most tunnels, often for the same host from every
// core, so noting a success must not write shared memory in the common
// case (issue 8): a host's pair is immutable, read without a lock, and
// replaced (compare-and-swap) only when the success adds something the
// rule could use. It adds nothing when the record is already in the pair
// with a success less than fresh old (the rule's window / seenFreshDiv),
// nor when the pair holds two other records that both succeeded less than
// fresh ago (each answers for the other, whichever record later fails),
// unless a target failure for the host was reported after those
// successes (seenEntry.failed): the rule needs a success after a failure,
// and the first one after it is always noted. The pair's times then lag by
// less than fresh but never hide a success that came after a failure. A
// host missing from the table (new, or dropped) is always added.
type targetSeen struct {
	m sync.Map // host -> *seenEntry

	mu sync.Mutex
	// mu guards the fields below.
	ring []string // the hosts in m, oldest first from head once full
	head int
}

const (
	// seenMax bounds the hosts remembered; beyond, the one added longest
	// ago is dropped (its next success adds it again).
	seenMax = 16384
	// seenFreshDiv sets seenFresh to the rule's window divided by it:
	// under 60ms of the default 60s.
	seenFreshDiv = 1024
)

type seenEntry struct {
	by atomic.Pointer[[2]seenBy] // replaced whole, never modified
	// failed holds the latest target failures of two distinct records
	// for the host, the last one first (nil: none since it was added),
	// replaced whole like by. Failures are rare next to successes; a
	// success is read against them without a write.
	failed atomic.Pointer[[2]seenBy]
}

// latest returns the later time of p's two entries (zero for nil).
func latest(p *[2]seenBy) time.Time {
	if p == nil {
		return time.Time{}
	}
	if p[1].at.After(p[0].at) {
		return p[1].at
	}
	return p[0].at
}

type seenBy struct {
	rec *Record
	at  time.Time
}

func (s *targetSeen) init() { s.ring = make([]string, 0, 64) }

// note records that r reached host at now; see targetSeen for when it
// leaves the table as is.
func (s *targetSeen) note(host string, r *Record, now time.Time, fresh time.Duration) {
	v, ok := s.m.Load(host)
	if !ok {
		v = s.add(host)
	}
	e := v.(*seenEntry)
	failed := latest(e.failed.Load())
	// in reports a success recent enough to stand for this one: less than
	// fresh ago, and not before the latest failure.
	in := func(b seenBy) bool { return now.Sub(b.at) < fresh && !b.at.Before(failed) }
	for {
		old := e.by.Load()
		var p [2]seenBy
		if old != nil {
			p = *old
		}
		in0, in1 := in(p[0]), in(p[1])
		switch {
		case p[0].rec == r && in0, p[1].rec == r && in1:
			return // r is there, recently enough
		case p[0].rec != nil && p[1].rec != nil && in0 && in1 && p[0].rec != p[1].rec:
			return // two others, recently enough
		}
		// r first, then the most recent other (the pair is ordered: p[0]
		// was written last, and the records are distinct).
		keep := p[0]
		if keep.rec == r {
			keep = p[1]
		}
		if e.by.CompareAndSwap(old, &[2]seenBy{{rec: r, at: now}, keep}) {
			return
		}
	}
}

// fail records r's target failure for host at now, so that the next
// success for it is noted whatever the pair holds (see note), and so that
// reachedElsewhere can tell a success since it from one before. A host
// not in the table is left out: nobody reached it lately, and its first
// success is noted anyway.
func (s *targetSeen) fail(host string, r *Record, now time.Time) {
	v, ok := s.m.Load(host)
	if !ok {
		return
	}
	e := v.(*seenEntry)
	for {
		old := e.failed.Load()
		var p [2]seenBy
		if old != nil {
			p = *old
		}
		if p[0].rec == r && !p[0].at.Before(now) || p[1].rec == r && !p[1].at.Before(now) {
			return // r's failure at now or later is there
		}
		keep := p[0] // the other record's latest, as in note
		if keep.rec == r {
			keep = p[1]
		}
		if e.failed.CompareAndSwap(old, &[2]seenBy{{rec: r, at: now}, keep}) {
			return
		}
	}
}

// reachedElsewhere reports whether a record skip does not name is known
// to have reached host (a host:port key) within win before now, and not
// before the latest target failure such a record reported for it: a
// success from before another upstream failed there says only that the
// host was up then (see Tracker.ReachedElsewhere). One lookup; nothing is
// written.
func (s *targetSeen) reachedElsewhere(host string, now time.Time, win time.Duration, skip func(*Record) bool) bool {
	v, ok := s.m.Load(host)
	if !ok {
		return false
	}
	e := v.(*seenEntry)
	p := e.by.Load()
	if p == nil {
		return false
	}
	other := func(b seenBy) bool { return b.rec != nil && (skip == nil || !skip(b.rec)) }
	since := now.Add(-win)
	if f := e.failed.Load(); f != nil {
		for _, b := range f {
			if other(b) && b.at.After(since) {
				since = b.at
			}
		}
	}
	for _, b := range p {
		if other(b) && !b.at.Before(since) {
			return true
		}
	}
	return false
}

// add inserts an empty entry for host (or returns the one another caller
// inserted first), dropping the oldest host beyond seenMax.
func (s *targetSeen) add(host string) any {
	v, loaded := s.m.LoadOrStore(host, &seenEntry{})
	if loaded {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ring) < seenMax {
		s.ring = append(s.ring, host)
		return v
	}
	s.m.Delete(s.ring[s.head])
	s.ring[s.head] = host
	s.head = (s.head + 1) % seenMax
	return v
}

// reachedByOther reports whether a record other than r is known to have
// reached host (a host:port key) at or after since.
func (s *targetSeen) reachedByOther(host string, r *Record, since time.Time) bool {
	v, ok := s.m.Load(host)
	if !ok {
		return false
	}
	p := v.(*seenEntry).by.Load()
	if p == nil {
		return false
	}
	for _, b := range p {
		if b.rec != nil && b.rec != r && !b.at.Before(since) {
			return true
		}
	}
	return false
}

// failedByOther reports whether a record other than r reported a target
// failure for host at or after since (the table keeps the latest of two
// records).
func (s *targetSeen) failedByOther(host string, r *Record, since time.Time) bool {
	v, ok := s.m.Load(host)
	if !ok {
		return false
	}
	p := v.(*seenEntry).failed.Load()
	if p == nil {
		return false
	}
	for _, b := range p {
		if b.rec != nil && b.rec != r && !b.at.Before(since) {
			return true
		}
	}
	return false
}

// sortTargets orders per-target cooldowns by end, then host, so snapshots
// are stable.
func sortTargets(ts []TargetCooldown) {
	slices.SortFunc(ts, func(a, b TargetCooldown) int {
		if c := a.Until.Compare(b.Until); c != 0 {
			return c
		}
		return strings.Compare(a.Host, b.Host)
	})
}

// cooling is targetCooling's verdict alone.
func cooling(_ Class, ok bool) bool { return ok }

// noteTargetFail adds r's failure at target (a host:port) to list, which
// keeps one entry per host:port within win, at most maxTargetFails, and
// returns the list, how many distinct hosts of it count as evidence
// against r, and whether target itself counted from an earlier failure
// (again). Evidence is others reaching the host:port after r failed there
// while none of them failed there within the window: a target that failed
// for another upstream too is flapping or came back, and says nothing
// about r (bug: a site down now and then for everyone cooled every
// upstream for it, two such sites cooled healthy upstreams whole). seen
// is the table others' outcomes are read from (target failures: what they
// reached; first-byte silence: what answered). Caller holds r.mu.
func noteTargetFail(list []targetFail, target string, now time.Time, win time.Duration, seen *targetSeen, r *Record) (keep []targetFail, hosts int, again bool) {
	keep = list[:0]
	known := false
	for _, f := range list {
		if now.Sub(f.at) < win {
			keep = append(keep, f)
			known = known || f.target == target
		}
	}
	if !known {
		keep = append(keep, targetFail{target: target, at: now})
		if len(keep) > maxTargetFails {
			keep = keep[len(keep)-maxTargetFails:]
		}
	}
	var buf [maxTargetFails]string
	counted := buf[:0]
	for _, f := range keep {
		h := targetHost(f.target)
		dup := slices.Contains(counted, h)
		if dup && f.target != target || !seen.reachedByOther(f.target, r, f.at) ||
			seen.failedByOther(f.target, r, now.Add(-win)) {
			continue
		}
		if f.target == target && f.at.Before(now) {
			again = true
		}
		if !dup {
			counted = append(counted, h)
		}
	}
	return keep, len(counted), again
}
