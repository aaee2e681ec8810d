package upstream

import "slices"

// The attempt loop's sticky-session part: which endpoint a session's
// request picks (pick), and what its answers bind (bindSession,
// HoldAnswer). The table itself is session.go's.

// pick selects an endpoint a admits and reserves it: the session's
// endpoint while it is usable, else the strategy's choice. A session's
// binding is decided once: its endpoint is left only when this request
// cannot use it (it is not eligible, cools for this host, was tried by
// this request, is not in this set). At its max_conns or rate (or with
// what it has promised to clients waiting longer) it is only busy: the
// request waits for it (pick returns nil, lined up for that endpoint
// alone), as any request waits for a limited upstream. Issue: a new
// session's first burst of 8 went out through 2-3 upstreams, each
// request that found the first pick's upstream at its max_conns moving
// the session on (with no "session moved" line), so one session had
// several exit IPs.
//
// A session whose endpoint is unusable gets the strategy's choice and is
// bound to it at once, provisionally (see sessions), so that the
// session's requests starting meanwhile follow; Succeeded confirms the
// move (and logs it). A pick that lost that race to another request of
// the session follows the winner (waiting for it when it is busy): its
// own choice is released, its rate token given back (a slow-start slot
// it took stays used). It notes in a.pickGen the generation of the
// session's binding the pick went by, for the answer's bind (a late
// answer must not undo a move).
func (p *Pool) pick(a *Attempts) *Endpoint {
	a.queued = p.lines.active()
	s := p.set.Load()
	st := p.settings.Load().strategy
	id := a.sess
	if id == "" {
		return st.pick(s, a)
	}
	a.sessBusy, a.pickClaimed = nil, false
	key, gen := p.sessions.follow(id)
	a.pickGen = gen
	if key != "" {
		if e, busy := a.pickBound(s, key); e != nil || busy {
			return e
		}
	}
	e := st.pick(s, a)
	if e == nil {
		return nil
	}
	// Each round lost means another request of the session changed its
	// binding meanwhile, to an endpoint this one cannot use: rare, and
	// bounded.
	for range claimRounds {
		win, gen := p.sessions.claim(id, key, e)
		a.pickGen = gen
		if win == e.Key {
			a.pickClaimed = true
			return e
		}
		if f, busy := a.pickBound(s, win); f != nil || busy {
			p.unreserve(e)
			return f
		}
		key = win
	}
	a.pickGen = 0 // served unbound: its answer binds nothing
	return e
}

// claimRounds bounds pick's claims for one pick.
const claimRounds = 3

// pickBound tries the endpoint the session is bound to (identity key):
// it returns it admitted and reserved, or busy=true when it is usable but
// at its limits (a.limited then holds it alone, a.rateWait its token's
// due time: the request waits for that endpoint and no other), or
// neither when the request cannot use it (see pick).
func (a *Attempts) pickBound(s *set, key string) (e *Endpoint, busy bool) {
	i, ok := s.byKey[key]
	if !ok {
		return nil, false // removed by a reload, or another instance's
	}
	ld := s.lds[i]
	a.busy = nil
	rw := a.rateWait
	a.rateWait = 0
	if a.admit(s, i) {
		a.rateWait = rw
		return s.eps[i], false
	}
	if a.busy == ld {
		a.limited = append(a.limited[:0], ld)
		a.overflow = false
		a.sessBusy = s.eps[i]
		return nil, true
	}
	a.rateWait = rw
	return nil, false
}

// unreserve undoes what admit reserved on e for a pick that does not use
// it: its max_conns slot and its rate token.
func (p *Pool) unreserve(e *Endpoint) {
	p.release(e)
	if e.limit != nil {
		e.limit.refund(p.share.Load())
	}
}

// HoldAnswer says that e's answer, which the caller reports next
// (Succeeded, Answered), is held back while another upstream is tried
// (pool.retry_statuses): it binds the session only if it is the answer
// the client gets in the end, when no later one is reported (Next or
// Failed then ends the loop with an error, or the caller releases e).
// Issue: a new session whose first answer (a 429) was retried on another
// upstream logged "session moved" from the upstream whose answer the
// client never saw, and each further retried answer logged one more move.
func (a *Attempts) HoldAnswer(e *Endpoint) {
	if i := a.useOf(e); i >= 0 {
		a.heldAns = i + 1 // an answer held before is superseded
	}
}

// bindHeld binds the session to the endpoint whose answer is held back,
// the one the client gets: as it was picked, its own later claims (the
// retries' provisional moves, none confirmed) are undone, so the session
// stays where the client's answer came from.
func (a *Attempts) bindHeld() {
	if a.heldAns == 0 {
		return
	}
	u := a.uses[a.heldAns-1]
	a.heldAns = 0
	if !u.ended {
		a.bindUse(u, true)
	}
}

func (a *Attempts) bindSession(e *Endpoint) {
	if a.sess == "" {
		return
	}
	i := a.useOf(e)
	if i >= 0 && a.heldAns == i+1 {
		return // held back: see HoldAnswer
	}
	a.heldAns = 0 // the client gets this answer, not one held before
	u := use{e: e}
	if i >= 0 {
		u = a.uses[i]
	}
	a.bindUse(u, false)
}

// bindUse binds the session to u's endpoint for u's pick (see
// sessions.bind); with undo, over a provisional binding one of this
// request's later picks claimed.
func (a *Attempts) bindUse(u use, undo bool) {
	if a.sess == "" {
		return
	}
	e := u.e
	var mine func(uint64) bool
	if undo {
		mine = func(gen uint64) bool {
			return slices.ContainsFunc(a.uses, func(o use) bool { return o.claim && o.gen == gen && o.e != e })
		}
	}
	from, fromKey, moved, report := a.p.sessions.bindOver(a.sess, e, u.gen, mine)
	if moved {
		ev := a.p.log.Info().Str("session", a.req.Session).Str("from", from).Str("to", e.Name)
		if a.req.User != "" {
			ev = ev.Str("user", a.req.User) // the session's owner: ids are per user
		}
		ev.Msg("session moved")
	}
	if report && a.p.fleet != nil {
		a.p.fleet.SessionBound(a.sess, e.Key, fromKey, a.p.sessions.ttl())
	}
}
