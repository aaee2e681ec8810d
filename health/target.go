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
// counted), expire like any other cooldown, grow geometrically per host, and
// are listed in Snapshot.Targets while active.
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
	streak   int       // coolings of this host without a success for it
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
	tc.after++
	if tc.after < s.policy.For(class).After {
		return
	}
	tc.after = 0
	tc.streak++
	d := s.policy.Cooldown(class, tc.streak, s.rand())
	tc.reason, tc.stage, tc.set = class, stage, now
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
	return r.ntargets.Load() > 0 && t.targetCooling(r, target)
}

// targetCooling reports whether r is cooling for target's host, or for
// target itself when it has a port, now.
func (t *Tracker) targetCooling(r *Record, target string) bool {
	now := t.clock.Now()
	host := targetHost(target)
	r.mu.Lock()
	defer r.mu.Unlock()
	if tc := r.targets[host]; tc != nil && now.Before(tc.deadline) {
		return true
	}
	if host == target {
		return false
	}
	tc := r.targets[target]
	return tc != nil && now.Before(tc.deadline)
}

// forgetTarget drops the entries of target's host and of target (a
// host:port) after a success for it (their streaks restart). An entry
// still cooling is kept: the success came from a tunnel opened before the
// ban.
func (t *Tracker) forgetTarget(r *Record, target string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.targets)
	for _, k := range [2]string{targetHost(target), target} {
		if tc := r.targets[k]; tc != nil && !now.Before(tc.deadline) {
			delete(r.targets, k)
		}
	}
	if len(r.targets) != n {
		r.ntargets.Store(int32(len(r.targets)))
		r.publish()
	}
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
func (t *Tracker) targetRule(s *settings, r *Record, now time.Time, target string, e *effects) {
	if s.cfg.TargetRuleHosts < 0 || targetHost(target) == target { // no port
		return
	}
	win := s.cfg.TargetRuleWindow
	keep := r.targetFails[:0]
	known := false
	for _, f := range r.targetFails {
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
	r.targetFails = keep
	// The next success for target by anyone is the evidence; make sure
	// the table notes it.
	t.seen.fail(target, now)
	var buf [maxTargetFails]string
	hosts := buf[:0]
	for _, f := range keep {
		if h := targetHost(f.target); !slices.Contains(hosts, h) && t.seen.reachedByOther(f.target, r, f.at) {
			hosts = append(hosts, h)
		}
	}
	n := len(hosts)
	if n < s.cfg.TargetRuleHosts {
		return
	}
	r.targetFails = nil
	r.countFailure(UpstreamError, StageTargetConnect, 1)
	r.consec[UpstreamError]++
	r.pending.Store(true)
	detail := fmt.Sprintf("target failures for %d hosts that other upstreams reach at the same port", n)
	t.cool(s, r, now, UpstreamError, StageTargetConnect, detail, errors.New(detail), e)
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
	// failed is the latest target failure any record reported for the
	// host (nil: none since it was added). Failures are rare next to
	// successes; a success is read against it without a write.
	failed atomic.Pointer[time.Time]
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
	var failed time.Time
	if f := e.failed.Load(); f != nil {
		failed = *f
	}
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

// fail records a target failure for host at now, so that the next
// success for it is noted whatever the pair holds (see note). A host not
// in the table is left out: nobody reached it lately, and its first
// success is noted anyway.
func (s *targetSeen) fail(host string, now time.Time) {
	v, ok := s.m.Load(host)
	if !ok {
		return
	}
	e := v.(*seenEntry)
	for {
		old := e.failed.Load()
		if old != nil && !old.Before(now) {
			return
		}
		if e.failed.CompareAndSwap(old, &now) {
			return
		}
	}
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
