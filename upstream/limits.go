package upstream

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// rateLimiter is a token bucket for an endpoint's new-tunnel rate (the
// provider's limit, [[upstream]] rate). The bucket holds at most
// max(rate, 1) tokens, so a burst never exceeds one second's worth. A
// saturated endpoint is skipped, never failed or cooled.
type rateLimiter struct {
	rate  float64
	burst float64
	clock health.Clock

	mu sync.Mutex
	// mu guards the fields below.
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, clock health.Clock) *rateLimiter {
	burst := max(rate, 1)
	return &rateLimiter{rate: rate, burst: burst, clock: clock, tokens: burst, last: clock.Now()}
}

// refill adds the tokens earned since last at rate, up to burst. Caller
// holds r.mu.
func (r *rateLimiter) refill(now time.Time, rate, burst float64) {
	if el := now.Sub(r.last); el > 0 {
		r.tokens += el.Seconds() * rate
		r.last = now
	}
	r.tokens = min(r.tokens, burst) // the burst shrinks when the share does
}

// share returns the rate and burst of this instance's share when share
// instances split the endpoint's rate (fleet mode; 1 otherwise).
func (r *rateLimiter) share(share int64) (rate, burst float64) {
	if share <= 1 {
		return r.rate, r.burst
	}
	rate = r.rate / float64(share)
	return rate, max(rate, 1)
}

// take consumes one token of this instance's share of the rate. When none
// is available it returns false and how long until one will be.
func (r *rateLimiter) take(share int64) (bool, time.Duration) {
	rate, burst := r.share(share)
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refill(now, rate, burst)
	if r.tokens >= 1 {
		r.tokens--
		return true, 0
	}
	wait := time.Duration((1 - r.tokens) / rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// ready reports whether take would succeed now, without taking a token.
func (r *rateLimiter) ready(share int64) bool {
	rate, burst := r.share(share)
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refill(now, rate, burst)
	return r.tokens >= 1
}

// refund gives back a token taken by a pick that a later check refused,
// so the refusal does not cost the endpoint a tunnel of its rate.
func (r *rateLimiter) refund(share int64) {
	_, burst := r.share(share)
	r.mu.Lock()
	r.tokens = min(r.tokens+1, burst)
	r.mu.Unlock()
}

// connShare returns this instance's share of an endpoint's max_conns when
// share instances split it: ceil(maxConns/share), at least 1 (0 stays
// unlimited).
func connShare(maxConns, share int64) int64 {
	if maxConns <= 0 || share <= 1 {
		return maxConns
	}
	return max((maxConns+share-1)/share, 1)
}

// Fleet is the pool's link to the other rotor instances of a fleet
// (package cluster implements it). The pool calls it on the data path, so
// it must never block: it queues and returns.
type Fleet interface {
	// SessionBound reports that sticky session id is bound to the
	// endpoint with identity key and stays so for ttl without use. The
	// pool reports a new or moved session at once and a session still in
	// use (or held by an open tunnel or request: RefreshSessions) at most
	// once per ttl/4. from is the key the fleet's binding had as far as
	// this instance knows: key itself for a refresh, the key it replaced
	// for a move, "" for a new session. A fleet whose binding is another
	// key by then (another instance moved the session meanwhile) keeps
	// it, and hands it back through ApplySession: a refresh or a late
	// answer never undoes a move.
	SessionBound(id, key, from string, ttl time.Duration)
}

// SetFleet links the pool to its fleet. Call it before the pool serves;
// nil (the default) is single-process mode.
func (p *Pool) SetFleet(f Fleet) { p.fleet = f }

// SetInstances sets how many instances share every endpoint's max_conns
// and rate: this instance then allows ceil(max_conns/n) concurrent tunnels
// (at least 1) and rate/n new tunnels per second per endpoint. n < 1 counts
// as 1 (the whole limits, single-process mode). The fleet calls it when
// its live-instance count changes; the pick path reads it atomically.
func (p *Pool) SetInstances(n int) {
	n64 := int64(max(n, 1))
	if old := p.share.Swap(n64); n64 < old {
		// A larger share: waiting clients may fit now.
		p.lines.wakeAll()
		if p.slotWaiters.Load() > 0 {
			p.wakeSlotWaiters()
		}
	}
}

// Instances returns the share set by SetInstances (1 by default).
func (p *Pool) Instances() int { return int(max(p.share.Load(), 1)) }

// Waiting for a limited endpoint. A client that finds every endpoint it
// may use out waits (Attempts.Next); one that found some of them at their
// max_conns or out of rate tokens lines up for those, first come first
// served: a slot or a token of an endpoint with a line goes to the client
// at its head, and a request arriving meanwhile joins the line instead of
// taking it. (Before, every waiter was woken for every freed slot and
// raced the others and every new request for it: with eight clients on
// two slots, some lost every race and failed after the whole
// wait_for_upstream while newer requests got through.)
//
// Lines are per endpoint identity (its load, which reloads keep), so a
// client that can use only some upstreams (its tags, its host's bans)
// holds up only requests for those. A client lines up at once for every
// endpoint its pick found limited, up to maxLines of them; beyond, it is
// woken for the others as before (Pool.freed, its rate timer), without a
// place. While no client waits anywhere, a pick reads one atomic counter
// more (waitLines.n) and nothing else.

// maxLines is how many endpoints one waiting client lines up for at most.
const maxLines = 32

// waitLines is the pool's lines, one per endpoint clients wait for.
type waitLines struct {
	// n counts the endpoints with a line: 0 keeps picks off the map. It is
	// alone on its cache line, so that lines forming and emptying do not
	// slow the pool's other fields down for every pick.
	n atomic.Int64
	_ [56]byte

	// byLoad maps a *load to its *line. Picks read it without the lock
	// (admit); mu serialises every change to it, to the lines and to the
	// waiters' places.
	byLoad sync.Map
	mu     sync.Mutex
	seq    uint64 // the last ticket given out; guarded by mu
}

// line is the clients waiting for one endpoint, oldest first.
type line struct {
	ld *load
	ws []*waiter // guarded by waitLines.mu
	// head is ws[0] (nil when the line is empty), for admit to read
	// without the lock.
	head atomic.Pointer[waiter]
}

// waiter is one waiting request's place in the lines.
type waiter struct {
	// ticket orders waiters by arrival: given when the request first
	// waited, kept for its whole attempt loop.
	ticket uint64
	// wake is signalled (never closed) when the waiter comes to the head
	// of a line, or the endpoint whose line it heads frees a slot.
	wake  chan struct{}
	lines []*line // the lines it is in; changed by its own request only
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// active reports whether any endpoint has a line.
func (q *waitLines) active() bool { return q.n.Load() > 0 }

// mayTake reports whether a request that is waiter w (nil for one that
// does not wait) may take ld's capacity: ld has no line, or w heads it.
func (q *waitLines) mayTake(ld *load, w *waiter) bool {
	v, ok := q.byLoad.Load(ld)
	if !ok {
		return true
	}
	h := v.(*line).head.Load()
	return h == nil || h == w
}

// ahead reports whether ld has a line that w (nil: a request that does
// not wait) does not head: its capacity goes to others first.
func (q *waitLines) ahead(ld *load, w *waiter) bool { return q.active() && !q.mayTake(ld, w) }

// wakeHead signals the head of ld's line, if it has one, and reports
// whether it did: the capacity ld just freed is the head's.
func (q *waitLines) wakeHead(ld *load) bool {
	v, ok := q.byLoad.Load(ld)
	if !ok {
		return false
	}
	h := v.(*line).head.Load()
	if h == nil {
		return false
	}
	h.signal()
	return true
}

// wakeAll signals the head of every line (the capacity of every
// endpoint may have grown: a fleet instance left).
func (q *waitLines) wakeAll() {
	q.byLoad.Range(func(_, v any) bool {
		if h := v.(*line).head.Load(); h != nil {
			h.signal()
		}
		return true
	})
}

// lineUp puts w (given a ticket at its first call) in the lines of lds,
// the endpoints its last pick found limited, and takes it out of the
// others: an endpoint that refused it for anything else (it cools, is
// banned for the host) is no capacity it waits for. Its ticket keeps its
// place: back in a line it left, it is ahead of those who came later.
func (q *waitLines) lineUp(w *waiter, lds []*load) {
	if len(lds) == 0 && len(w.lines) == 0 && w.ticket != 0 {
		return // w.lines is only changed by w's own request
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.ticket == 0 {
		q.seq++
		w.ticket = q.seq
	}
	keep := w.lines[:0]
	for _, l := range w.lines {
		if slices.Contains(lds, l.ld) {
			keep = append(keep, l)
		} else {
			q.remove(l, w)
		}
	}
	clear(w.lines[len(keep):])
	w.lines = keep
	for _, ld := range lds {
		if !slices.ContainsFunc(w.lines, func(l *line) bool { return l.ld == ld }) {
			w.lines = append(w.lines, q.insert(ld, w))
		}
	}
}

// leave takes w out of every line, and drops a wake-up it did not use.
func (q *waitLines) leave(w *waiter) {
	if len(w.lines) > 0 {
		q.mu.Lock()
		for _, l := range w.lines {
			q.remove(l, w)
		}
		q.mu.Unlock()
		clear(w.lines)
		w.lines = w.lines[:0]
	}
	select {
	case <-w.wake:
	default:
	}
}

// insert puts w in ld's line by its ticket and returns the line. A w that
// comes to the head is signalled, as remove signals a new head: what ld
// freed since w's pick (no one was signalled for it, or another head
// was) is w's now, and w must pick again to see it. Caller holds q.mu.
func (q *waitLines) insert(ld *load, w *waiter) *line {
	var l *line
	if v, ok := q.byLoad.Load(ld); ok {
		l = v.(*line)
	} else {
		l = &line{ld: ld}
		q.byLoad.Store(ld, l)
		q.n.Add(1)
	}
	i, _ := slices.BinarySearchFunc(l.ws, w.ticket, func(x *waiter, t uint64) int { return cmp.Compare(x.ticket, t) })
	l.ws = slices.Insert(l.ws, i, w)
	if i == 0 {
		l.head.Store(w)
		w.signal()
	}
	return l
}

// remove takes w out of l; a new head is signalled (the capacity it
// waits for may be there already), an empty line dropped. Caller holds
// q.mu.
func (q *waitLines) remove(l *line, w *waiter) {
	i := slices.Index(l.ws, w)
	if i < 0 {
		return
	}
	l.ws = slices.Delete(l.ws, i, i+1)
	if len(l.ws) == 0 {
		l.head.Store(nil)
		q.byLoad.Delete(l.ld)
		q.n.Add(-1)
		return
	}
	if i == 0 {
		l.head.Store(l.ws[0])
		l.ws[0].signal()
	}
}
