package upstream

import (
	"hash/maphash"
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

// refill adds the tokens earned since last. Caller holds r.mu.
func (r *rateLimiter) refill(now time.Time) {
	if el := now.Sub(r.last); el > 0 {
		r.tokens = min(r.tokens+el.Seconds()*r.rate, r.burst)
		r.last = now
	}
}

// take consumes one token. When none is available it returns false and
// how long until one will be.
func (r *rateLimiter) take() (bool, time.Duration) {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refill(now)
	if r.tokens >= 1 {
		r.tokens--
		return true, 0
	}
	wait := time.Duration((1 - r.tokens) / r.rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

// refund gives back a token taken by a pick that a later check refused,
// so the refusal does not cost the endpoint a tunnel of its rate.
func (r *rateLimiter) refund() {
	r.mu.Lock()
	r.tokens = min(r.tokens+1, r.burst)
	r.mu.Unlock()
}

// Sticky sessions bound their memory two ways: expired entries are swept
// at most every sessionSweepEvery per shard (amortised O(1) per bind), and
// the table never holds more than maxSessions ids (beyond, an arbitrary
// live entry of the shard is evicted, which costs that session its
// stickiness only).
const (
	maxSessions       = 100_000
	sessionSweepEvery = time.Minute
	sessionShards     = 16 // so that sessions on many cores rarely share a lock
)

// sessions maps sticky-session ids to the identity key of the endpoint
// that serves them. An entry slides forward on each successful use and
// expires after ttl without one. Keys (not *Endpoint) are stored so that an
// entry survives a reload that rebuilds the endpoint values.
type sessions struct {
	ttlNs  atomic.Int64 // time.Duration; changed by a reload
	max    int          // entries held at most, all shards together
	clock  health.Clock
	seed   maphash.Seed
	shards [sessionShards]sessionShard
}

type sessionShard struct {
	mu sync.Mutex
	// mu guards the fields below.
	m         map[string]session
	lastSweep time.Time
}

type session struct {
	key  string // endpoint identity
	name string // endpoint name when bound, for the move log line
	seen time.Time
}

func newSessions(ttl time.Duration, max int, clock health.Clock) *sessions {
	s := &sessions{max: max, clock: clock, seed: maphash.MakeSeed()}
	s.ttlNs.Store(int64(ttl))
	now := clock.Now()
	for i := range s.shards {
		s.shards[i].m = map[string]session{}
		s.shards[i].lastSweep = now
	}
	return s
}

func (s *sessions) shard(id string) *sessionShard {
	return &s.shards[maphash.String(s.seed, id)%sessionShards]
}

// lookup returns the identity key bound to id, or "" when id is empty,
// unknown or expired.
func (s *sessions) lookup(id string) string {
	if id == "" {
		return ""
	}
	now := s.clock.Now()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x, ok := sh.m[id]
	if !ok {
		return ""
	}
	if now.Sub(x.seen) > s.ttl() {
		delete(sh.m, id)
		return ""
	}
	return x.key
}

// bind records that e served id now (sliding the TTL). When id was bound
// to another live endpoint it returns that endpoint's name and moved=true,
// for the caller to log after the lock is released.
func (s *sessions) bind(id string, e *Endpoint) (from string, moved bool) {
	if id == "" {
		return "", false
	}
	now := s.clock.Now()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, had := sh.m[id]
	switch {
	case !had:
		s.makeRoom(sh, now)
	case old.key == e.Key:
		if old.name == e.Name {
			// The common case: slide the TTL in place, no new strings.
			old.seen = now
			sh.m[id] = old
			return "", false
		}
	case now.Sub(old.seen) <= s.ttl():
		from, moved = old.name, true
	}
	sh.m[id] = session{key: e.Key, name: e.Name, seen: now}
	return from, moved
}

// makeRoom sweeps sh's expired entries when a sweep is due, then evicts one
// entry if sh is still full. Caller holds sh.mu.
func (s *sessions) makeRoom(sh *sessionShard, now time.Time) {
	if now.Sub(sh.lastSweep) >= min(s.ttl(), sessionSweepEvery) {
		for k, x := range sh.m {
			if now.Sub(x.seen) > s.ttl() {
				delete(sh.m, k)
			}
		}
		sh.lastSweep = now
	}
	if len(sh.m) >= max(s.max/sessionShards, 1) {
		for k := range sh.m { // map order is unspecified: an arbitrary victim
			delete(sh.m, k)
			break
		}
	}
}

// len returns the number of entries held (expired ones not yet swept
// included).
func (s *sessions) len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (s *sessions) ttl() time.Duration { return time.Duration(s.ttlNs.Load()) }

// setTTL applies a reloaded pool.session_ttl to every session's next use.
func (s *sessions) setTTL(d time.Duration) { s.ttlNs.Store(int64(d)) }
