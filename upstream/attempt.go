package upstream

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// aliveWindow is how recently an upstream must have served a tunnel for a
// deadline on an answer to CONNECT that the dialer could not attribute
// (an http:// proxy, a pipelined SOCKS5 handshake) to count as the
// target's: a proxy that worked a minute ago and now goes silent after
// accepting a CONNECT is most likely waiting for a target that does not
// answer. A proxy that really hangs is misread for at most this long,
// and the target-failure rule still catches it when the hosts it fails
// on are reached by others.
const aliveWindow = time.Minute

// Attempts is the attempt loop for one client request, for callers that
// do their own I/O per endpoint (plain-HTTP forwarding). Not safe for
// concurrent use.
type Attempts struct {
	p    *Pool
	cfg  PoolConfig // the settings this request started with
	req  Request
	host string
	// key is the lower-case host:port the request's outcomes are filed
	// under with health (SuccessTarget, Failure.Target): the
	// target-failure rule compares exactly what other upstreams reached.
	key string
	// invalid is set when req.Addr cannot be sent to any upstream; Next
	// returns it before picking one.
	invalid error
	// tagKey names req.Tags' set (see tagSet).
	tagKey string
	// sess is the request's session key (SessionID; "" for none).
	sess  string
	list  []Attempt
	tried []*Endpoint
	// uses holds, for each endpoint Next returned, what its use holds
	// until Release (or Failed, Neutral) ends it, exactly once: the
	// endpoint's active count and, for a session, the session (see
	// sessions.hold) and the generation of the binding it was picked
	// under. pickGen passes that generation from pick to Next, and
	// pickClaimed whether that pick made the binding (claim).
	uses        []use
	usesBuf     [3]use // uses' first ones (the default max_attempts), without an allocation
	pickGen     uint64
	pickClaimed bool
	// heldAns is 1 + the index in uses of the use whose answer the caller
	// holds back while it tries another upstream (HoldAnswer; 0: none).
	heldAns int
	// rateWait is the shortest time until a rate-limited endpoint refused
	// by the last pick has a token again (0: none was).
	rateWait  time.Duration
	waitTimer <-chan time.Time
	// w is the request's place in the pool's lines for limited endpoints
	// (limits.go), made when it first waits. The last pick of Next noted
	// in limited the endpoints it found at their max_conns or rate, or
	// whose capacity is older waiters' (up to maxLines; overflow: there
	// were more). A pick sets queued while any endpoint has a line.
	w        *waiter
	limited  []*load
	overflow bool
	queued   bool
	// busy is the endpoint (its load) the last noteLimited found at its
	// limits: pickBound tells a busy session endpoint from one the
	// request cannot use by it.
	busy *load
	// sessBusy is the session's endpoint when the last pick found it busy
	// and waits for it (nil otherwise): an expired wait says so.
	sessBusy *Endpoint
	// replayable is set (Replayable) for a request that may be sent to
	// another upstream after it reached one (a tunnel before its answer,
	// an idempotent plain-HTTP request whose body is held); slow holds
	// such a request's first slow_body at first_byte until a second
	// upstream shows whose it is.
	replayable bool
	slow       *heldFailure
	// reached holds the target failures of this request that were retried
	// because others reach the target (see Failed): when a later attempt
	// reaches it, each of those upstreams cools for it (OthersReached).
	reached []heldFailure
}

// use is one endpoint Next returned, in use until ended (see
// Attempts.uses).
type use struct {
	e     *Endpoint
	gen   uint64 // the session's binding generation at the pick (0: none)
	claim bool   // the pick made that binding (sessions.claim)
	held  bool   // the session is held (sessions.hold) until the use ends
	ended bool
}

// heldFailure is a failure not yet reported to e's record.
type heldFailure struct {
	e *Endpoint
	f *health.Failure
}

// Replayable says the request may be retried after it reached an
// upstream: a tunnel before its answer (Dial), or an idempotent plain-HTTP
// request whose body is held. Then a first silence (slow_body at
// first_byte) is held back: if another upstream answers the same request,
// the first one was slow and is reported; if a second one is silent too,
// the target is slow: neither is blamed, and the client gets
// target_timeout (504) instead of a third try. Before, one slow page
// cooled every upstream it was retried on, and a pool of a few went 503
// for everyone. And a target failure at a host:port other upstreams
// reach is retried on another upstream (see Failed); a request that is
// not replayable gets it as its answer.
func (a *Attempts) Replayable() { a.replayable = true }

// othersReached cools, for this request's target only, each upstream
// whose target failure was retried (see Failed), once e reached the
// target: another upstream did get there (health.Tracker.OthersReached).
func (a *Attempts) othersReached() {
	for _, h := range a.reached {
		a.p.tr.OthersReached(h.e.rec, h.f)
	}
	a.reached = nil
}

// triedRecord reports whether r is the record of an endpoint this request
// tried (the one that just failed included).
func (a *Attempts) triedRecord(r *health.Record) bool {
	for _, t := range a.tried {
		if t.rec == r {
			return true
		}
	}
	return false
}

// flushSlow reports the held failure, if any.
func (a *Attempts) flushSlow() {
	if h := a.slow; h != nil {
		a.slow = nil
		a.p.tr.Fail(h.e.rec, h.f)
	}
}

// NewAttempts starts an attempt loop for req. A req.Addr no upstream
// could be asked for (see checkTarget: a bad port, a host with controls,
// spaces or other bytes a request line cannot carry) makes Next fail at
// once with an error wrapping ErrInvalidTarget, before any upstream is
// picked: the client's fault, reported to no record. It is no
// *health.Failure: no upstream was asked, so there is no class or stage
// to give (a target_unreachable Failure here was logged as a failure at
// target_connect).
func (p *Pool) NewAttempts(req Request) *Attempts {
	cfg := p.Config()
	a := &Attempts{p: p, cfg: cfg, req: req, host: req.Host(), tagKey: tagKey(req.Tags), sess: SessionID(req.User, req.Session),
		tried: make([]*Endpoint, 0, cfg.MaxAttempts)}
	host, port, err := checkTarget(req.Addr)
	if err != nil {
		a.invalid = err
		return a
	}
	a.key = canonicalTarget(req.Addr, host, port)
	return a
}

// tagKey names a tag set, for its view and its round-robin cursor: the
// tags sorted, without duplicates ("" for none).
func tagKey(tags []string) string {
	switch len(tags) {
	case 0:
		return ""
	case 1:
		return tags[0]
	}
	t := slices.Clone(tags)
	slices.Sort(t)
	return strings.Join(slices.Compact(t), "\x00")
}

// tagSet returns the request's tags and their key (see admitter).
func (a *Attempts) tagSet() ([]string, string) { return a.req.Tags, a.tagKey }

// canonicalTarget returns addr as "host:port" with a lower-case host, the
// port without leading zeros and brackets exactly around IPv6 literals:
// addr itself (no allocation) when it already is.
func canonicalTarget(addr, host string, port uint16) string {
	lower := strings.ToLower(host)
	_, ps, _ := net.SplitHostPort(addr) // cannot fail: checkTarget accepted addr
	if lower == host && ps[0] != '0' && (strings.IndexByte(host, ':') >= 0) == (addr[0] == '[') {
		return addr
	}
	return net.JoinHostPort(lower, strconv.Itoa(int(port)))
}

// List returns the failed attempts so far. An endpoint whose answer was
// retried for its status (pool.retry_statuses) did not fail and is not in
// it: Tried counts it.
func (a *Attempts) List() []Attempt { return a.list }

// Tried returns how many endpoints Next returned for this request: every
// attempt made, failed, retried for its answer's status, neutral or the
// one that served (each counts as one of pool.max_attempts).
func (a *Attempts) Tried() int { return len(a.tried) }

// Next returns the next endpoint to try, counted as active (release it with
// Release or through a Lease). Every endpoint it returns counts as one of
// pool.max_attempts, whether it then fails or is retried for its answer.
// It waits for an eligible endpoint when none has been tried yet; when the
// wait expires it returns ErrNoEligible (a *NoEligibleError naming the tags
// when the request has some); an *AttemptsError when attempts ran out or no
// untried endpoint is left. A request for tags no endpoint carries gets
// its *NoEligibleError (Matching 0) at once, without waiting.
func (a *Attempts) Next(ctx context.Context) (e *Endpoint, err error) {
	if a.invalid != nil {
		return nil, a.invalid
	}
	defer func() {
		if err != nil {
			a.flushSlow() // no other upstream gets to answer
			a.bindHeld()  // the client gets the answer held back, if any
		}
	}()
	p := a.p
	slot := false // registered in slotWaiters
	defer func() {
		if a.w != nil {
			p.lines.leave(a.w) // the next in line may have what this request no longer waits for
		}
		if slot {
			p.slotWaiters.Add(-1)
		}
	}()
	for len(a.tried) < a.cfg.MaxAttempts {
		// Take the wake-up channels before picking, so a change between
		// the pick and the wait is not lost.
		changed := p.tr.Changed()
		freed := *p.freed.Load()
		a.rateWait, a.limited, a.overflow = 0, a.limited[:0], false
		if e := p.pick(a); e != nil {
			a.tried = append(a.tried, e)
			u := use{e: e, gen: a.pickGen, claim: a.pickClaimed}
			if a.sess != "" {
				u.held = p.sessions.hold(a.sess)
			}
			if a.uses == nil {
				a.uses = a.usesBuf[:0]
			}
			a.uses = append(a.uses, u)
			return e, nil
		}
		// After a failed attempt, no other upstream to try now: wait for
		// one as a first pick does, within the same wait_for_upstream,
		// while one may still come (an untried one that is cooling, being
		// probed or at its limits); none can when every one was tried, is
		// disabled or cools for this host only: the client is told now.
		if len(a.tried) > 0 && !a.awaitable() {
			break
		}
		if len(a.req.Tags) > 0 && len(p.set.Load().viewOf(a).idx) == 0 {
			// No upstream carries these tags: no state change can help,
			// only a reload, and waiting wait_for_upstream for one tells
			// the client nothing it cannot be told now.
			return nil, &NoEligibleError{Tags: a.req.Tags}
		}
		if a.lineUp(&slot) {
			// Registered: pick once more, so that a slot freed before
			// the registration is seen by that pick. (A line signals the
			// client that comes to its head, so joining one loses
			// nothing.)
			continue
		}
		if a.waitTimer == nil {
			a.waitTimer = p.clock.After(a.cfg.WaitForUpstream)
		}
		var retry <-chan time.Time
		if a.rateWait > 0 {
			retry = p.clock.After(a.rateWait)
		}
		if !slot {
			freed = nil // a freed slot is the head of its line's
		}
		if err := p.wait(ctx, changed, freed, a.w.wake, retry, a.waitTimer); err != nil {
			if errors.Is(err, ErrNoEligible) && len(a.tried) > 0 {
				break // what failed says more than that nothing else came
			}
			if errors.Is(err, ErrNoEligible) {
				return nil, a.noEligible()
			}
			return nil, err
		}
	}
	return nil, &AttemptsError{Attempts: a.list}
}

// lineUp puts the request in the lines of the endpoints its last pick
// found limited, and registers it in slotWaiters (*slot) when there were
// more than it lines up for. It reports whether it registered it now.
func (a *Attempts) lineUp(slot *bool) bool {
	p := a.p
	if a.w == nil {
		a.w = &waiter{wake: make(chan struct{}, 1)}
	}
	p.lines.lineUp(a.w, a.limited)
	if a.overflow && !*slot {
		*slot = true
		p.slotWaiters.Add(1)
		return true
	}
	return false
}

// noteLimited records that the pick found endpoint ld (its load) at its
// limits, or its capacity promised to older waiters: capacity the request
// may line up for if nothing else admits it.
func (a *Attempts) noteLimited(ld *load) {
	a.busy = ld
	if slices.Contains(a.limited, ld) {
		return
	}
	if len(a.limited) >= maxLines {
		a.overflow = true
		return
	}
	a.limited = append(a.limited, ld)
}

// admit is the filter every strategy consults (see admitter), for
// endpoint i of s. Checks are ordered so that nothing is spent on an
// endpoint that is then refused: free checks first (state, attempts,
// tags), then the reversible reservations (a max_conns slot, a rate token:
// undone on refusal), and last the only irreversible one, the tracker's
// slow-start slot in AdmitTarget, which is consumed only when it answers
// yes. The gate answers without the health record, which is read only
// when the gate asks.
func (a *Attempts) admit(s *set, i int) bool {
	p := a.p
	h := &s.hot[i]
	open, known := h.gate.Known()
	if known && !open {
		return false
	}
	e, ld := s.eps[i], s.lds[i]
	if !known && !p.tr.Eligible(e.rec) {
		return false
	}
	if a.triedLoad(ld) { // same identity, even across a reload
		return false
	}
	if len(a.req.Tags) > 0 && !e.HasTags(a.req.Tags) {
		return false
	}
	if a.queued && !p.lines.mayTake(ld, a.w) {
		a.noteLimited(ld) // clients waiting for it come first
		return false
	}
	share := p.share.Load() // fleet mode: this instance's share of the limits
	// The Endpoint is read before the reservation's atomic add (a full
	// fence on amd64), so that at 100,000 endpoints fetching it overlaps
	// with fetching the load instead of following it (see hot). Rate
	// shares a line with MaxConns and ld, which the release reads; the
	// rate limiter, on the next line, is read only when there is a rate.
	rate := e.Rate
	if !reserve(ld, connShare(int64(h.maxConns), share)) {
		a.noteLimited(ld)
		return false // saturated: skipped, not failed, not cooled
	}
	var limit *rateLimiter
	if rate > 0 { // limit is set exactly when Rate is
		limit = e.limit
	}
	if limit != nil {
		if ok, wait := limit.take(share); !ok {
			ld.active.Add(-1)
			a.noteLimited(ld)
			if a.rateWait == 0 || wait < a.rateWait {
				a.rateWait = wait
			}
			return false
		}
	}
	if open, known = h.gate.Known(); known && !open || !known && !p.tr.AdmitTarget(e.rec, a.key) {
		if limit != nil {
			limit.refund(share)
		}
		ld.active.Add(-1)
		return false
	}
	return true
}

// awaitable reports whether an endpoint this request has not tried may
// still become one it can use: in its view (its tags), not disabled, not
// cooling for its host. O(the view), after a failed attempt only.
func (a *Attempts) awaitable() bool {
	p := a.p
	s := p.set.Load()
	ok := func(i int) bool {
		e := s.eps[i]
		st, _ := p.tr.Status(e.rec)
		return !a.triedLoad(s.lds[i]) && st != health.Disabled && !p.tr.TargetCooling(e.rec, a.key)
	}
	if list := s.viewOf(a).restricted(); list != nil {
		return slices.ContainsFunc(list, func(i int32) bool { return ok(int(i)) })
	}
	for i := range s.eps {
		if ok(i) {
			return true
		}
	}
	return false
}

// triedLoad reports whether the endpoint whose load is ld (its identity,
// across reloads) was tried for this request already.
func (a *Attempts) triedLoad(ld *load) bool {
	for _, t := range a.tried {
		if t.ld == ld {
			return true
		}
	}
	return false
}

// viable is admit without its reservations (see admitter): false only
// where admit refuses for sure (not eligible, tried, without the tags, at
// max_conns, cooling for the host). A rate token or a slow-start slot is
// left for admit to find.
func (a *Attempts) viable(s *set, i int) bool {
	p := a.p
	h := &s.hot[i]
	open, known := h.gate.Known()
	if known && !open {
		return false
	}
	e, ld := s.eps[i], s.lds[i]
	if a.triedLoad(ld) {
		return false
	}
	if len(a.req.Tags) > 0 && !e.HasTags(a.req.Tags) {
		return false
	}
	if a.queued && !p.lines.mayTake(ld, a.w) {
		a.noteLimited(ld)
		return false
	}
	if m := connShare(int64(h.maxConns), p.share.Load()); m > 0 && ld.active.Load() >= m {
		a.noteLimited(ld)
		return false
	}
	return known || p.tr.Eligible(e.rec) && !p.tr.TargetCooling(e.rec, a.key)
}

// Succeeded reports a successful attempt on e (which stays active until
// Release). With a session id the session is bound to e (its TTL slides)
// unless it moved since e was picked (a late answer does not move it
// back) or e's answer is held back (HoldAnswer: it binds once the client
// gets it); a session that was bound to another endpoint has moved, which
// is logged at info. In fleet mode a new or moved binding (and a
// refresh, at most once per ttl/4) is handed to the fleet, which queues
// it: nothing waits on Redis. The session is held from the pick to
// Release: it does not expire while e serves it.
func (a *Attempts) Succeeded(e *Endpoint) { a.succeeded(e, a.p.tr.SuccessTarget) }

// Served is Succeeded for a forwarded plain-HTTP answer that is no ban
// (health.Tracker.SuccessServed): the site served through e, which also
// ends the streaks of e's expired bans and silences for its host; a
// tunnel set up (Succeeded) does not.
func (a *Attempts) Served(e *Endpoint) { a.succeeded(e, a.p.tr.SuccessServed) }

func (a *Attempts) succeeded(e *Endpoint, success func(*health.Record, string)) {
	a.flushSlow()
	success(e.rec, a.key)
	if a.reached != nil {
		a.othersReached() // after the success, which the target rule reads
	}
	a.bindSession(e)
}

// Answered is Succeeded for an answer that counts against e for its
// target (a ban status, which the caller reports next as
// target_http_error): the session binds as for a success, but e's failure
// runs and its per-target cooldown streak stay, so repeated bans of a
// host grow their cooldown and `after` can count them. (A success before
// the report restarted both: every ban was a first ban.)
func (a *Attempts) Answered(e *Endpoint) {
	a.flushSlow()
	if a.reached != nil {
		a.othersReached() // the target answered e: it is reachable
	}
	a.bindSession(e)
}

// useOf returns the index in a.uses of e's use not yet ended, -1 when
// there is none.
func (a *Attempts) useOf(e *Endpoint) int {
	for i := range a.uses {
		if u := &a.uses[i]; u.e == e && !u.ended {
			return i
		}
	}
	return -1
}

// Release ends the use of e, an endpoint Next returned for this request:
// e is no longer active for it, and the session it held since the pick
// slides its TTL from now. Only the first call for a use counts (Failed
// and Neutral end it too), so the active count stays exact.
func (a *Attempts) Release(e *Endpoint) {
	i := a.useOf(e)
	if i < 0 {
		return
	}
	if a.heldAns == i+1 {
		a.bindHeld() // released with no later answer: the client got it
	}
	u := &a.uses[i]
	u.ended = true
	p := a.p
	p.release(e)
	if !u.held {
		return
	}
	if key := p.sessions.release(a.sess); key != "" && p.fleet != nil {
		p.fleet.SessionBound(a.sess, key, key, p.sessions.ttl()) // a refresh
	}
}

// Failed reports a failed attempt on e and releases it. It returns nil when
// the loop may go on, or the error to give the client: the client's own
// cancellation, or an *AttemptsError after a target failure or a failure
// the client or rotor's own machine caused (noOnesFault: reported to no
// record).
//
// A target failure (target_unreachable, target_timeout) at a host:port
// another upstream reached lately (health.Tracker.ReachedElsewhere: within
// the target rule's window, since the last target failure another
// upstream reported there, the upstreams this request tried left out)
// says this upstream cannot get there, not that the target is down: a
// TLS front whose proxy hangs, a silent http:// proxy, one that closes a
// plain-HTTP request unanswered, a firewalled SOCKS5 exit answering REP 5.
// It is reported as a target failure, and a replayable request (see
// Replayable) goes on to another upstream; when one of them then reaches
// the target, e cools for that host:port only (othersReached). One lookup
// in the tracker's table of recent successes, on target failures only.
//
// Before reporting, it completes what the dialers and the gateway could
// not know (classify.go): a proxy's answer to a plain-HTTP request
// (plainAnswer), an address type the upstream lacks for this target
// (forAddrType), and a wait for an unattributed CONNECT answer on an
// upstream that served within aliveWindow (target_timeout). An
// auth_rejected through an endpoint whose credentials a reload has since
// replaced is only counted (health.Tracker.FailStale).
func (a *Attempts) Failed(ctx context.Context, e *Endpoint, err error) (stop error) {
	p := a.p
	defer func() {
		if stop != nil {
			a.bindHeld() // the client gets the answer held back, if any
		}
	}()
	a.Release(e)
	if ctx.Err() != nil && IsCanceled(err) {
		// The client went away: neither a success nor a failure.
		p.tr.Neutral(e.rec)
		a.flushSlow()
		return ctx.Err()
	}
	f := Classify(err, health.StageDial)
	f = forAddrType(plainAnswer(f), a.host)
	var tw *targetWaitError
	if f.Class == health.Timeout && errors.As(f, &tw) && p.tr.SucceededWithin(e.rec, aliveWindow) {
		tw.servedLately() // its text says whose wait it is, as the class does
		f = &health.Failure{Class: health.TargetTimeout, Stage: health.StageTargetConnect, Target: f.Target, Err: f.Err}
	}
	if noOnesFault(f) {
		p.tr.Neutral(e.rec)
		if a.key != "" {
			f.Target = a.key // reported to no record: it names the destination to the client
		}
		a.list = append(a.list, Attempt{Upstream: e.Name, Failure: f})
		return &AttemptsError{Attempts: a.list}
	}
	// Health files the outcome under host:port (a.key), so that the
	// target-failure rule counts only what others reached at that very
	// port; an address-type refusal is filed under the host alone, which
	// the rule never counts: the client chose the address type.
	switch {
	case errors.Is(f, ErrAddrType):
		f.Target = a.host
	case a.key != "":
		f.Target = a.key
	case f.Target == "":
		f.Target = a.host
	}
	if a.replayable && f.Class == health.SlowBody && f.Stage == health.StageFirstByte {
		if a.slow == nil {
			a.slow = &heldFailure{e: e, f: f}
			a.list = append(a.list, Attempt{Upstream: e.Name, Failure: f})
			return nil
		}
		// A second upstream silent for the same request: the target is.
		a.slow = nil
		p.tr.Neutral(e.rec)
		tf := &health.Failure{Class: health.TargetTimeout, Stage: health.StageFirstByte, Target: f.Target, Err: f.Err}
		a.list = append(a.list, Attempt{Upstream: e.Name, Failure: tf})
		return &AttemptsError{Attempts: a.list}
	}
	a.flushSlow()
	// Asked before the failure is reported: the answer is about the
	// others, and this failure is no evidence for or against them.
	retry := f.Class.IsTargetFailure() && a.replayable && p.tr.ReachedElsewhere(a.key, a.triedRecord)
	if f.Class == health.AuthRejected && e.credsReplaced.Load() {
		// The dial used the password a reload replaced meanwhile: its
		// rejection must not cool the upstream the new one serves.
		p.tr.FailStale(e.rec, f)
	} else {
		p.tr.Fail(e.rec, f)
	}
	a.list = append(a.list, Attempt{Upstream: e.Name, Failure: f})
	if f.Class.IsTargetFailure() {
		if !retry {
			return &AttemptsError{Attempts: a.list}
		}
		a.reached = append(a.reached, heldFailure{e: e, f: f})
	}
	return nil
}

// Neutral releases e after an attempt that ended by the client's doing
// once e was picked (the gateway: the client's request body failed while
// it was sent). It is neither a success nor a failure: nothing is
// reported to e's record, and the caller tries no other upstream.
func (a *Attempts) Neutral(e *Endpoint) {
	a.Release(e)
	a.p.tr.Neutral(e.rec)
}

// Release ends e's active use by a request that Next returned it for. It
// does not end the hold of the request's session: Attempts.Release does
// both and is the one to call.
func (p *Pool) Release(e *Endpoint) { p.release(e) }

// Report records a failure observed on e after the client was answered.
func (p *Pool) Report(e *Endpoint, f *health.Failure) { p.tr.Fail(e.rec, f) }

// DialContext dials addr through e with the endpoint's own dialer. It does
// not report to health (the pool's attempt loop does), but the duration of
// a successful dial + proxy handshake feeds e's smoothed latency, whoever
// dials (Pool.Dial, or the gateway's plain-HTTP transports).
func (e *Endpoint) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	t0 := e.clock.Now()
	c, err := e.dialer.DialContext(ctx, network, addr)
	if err == nil {
		e.observeLatency(e.clock.Now().Sub(t0))
	}
	return c, err
}

// wait blocks until the tracker signals a change, a slot frees (freed,
// for clients in slotWaiters), the client comes to the head of a line or
// the endpoint it heads the line of frees a slot (wake), a rate token is
// due, the wait expires or ctx ends. It counts the client as waiting
// meanwhile.
func (p *Pool) wait(ctx context.Context, changed, freed, wake <-chan struct{}, retry, expired <-chan time.Time) error {
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	select {
	case <-changed:
		return nil
	case <-freed:
		return nil
	case <-wake:
		return nil
	case <-retry:
		return nil
	case <-expired:
		return ErrNoEligible
	case <-ctx.Done():
		return ctx.Err()
	}
}
