package upstream

import (
	"sync"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// rateLimiter is a token bucket for an endpoint's new-tunnel rate (the
// provider's limit). A saturated endpoint is skipped, never failed.
type rateLimiter struct {
	rate  float64
	clock health.Clock

	mu     sync.Mutex // guards the fields below
	tokens float64
	last   time.Time
}

func newRateLimiter(rate float64, clock health.Clock) *rateLimiter {
	burst := rate
	if burst < 1 {
		burst = 1
	}
	return &rateLimiter{rate: rate, clock: clock, tokens: burst, last: clock.Now()}
}

func (r *rateLimiter) take() bool {
	now := r.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	burst := r.rate
	if burst < 1 {
		burst = 1
	}
	r.tokens += now.Sub(r.last).Seconds() * r.rate
	if r.tokens > burst {
		r.tokens = burst
	}
	r.last = now
	if r.tokens < 1 {
		return false
	}
	r.tokens--
	return true
}

// sessions maps sticky-session ids to the endpoint that serves them. An
// entry slides forward on each use and expires after ttl without use.
type sessions struct {
	ttl   time.Duration
	clock health.Clock

	mu sync.Mutex // guards m
	m  map[string]*session
}

type session struct {
	e    *Endpoint
	seen time.Time
}

func newSessions(ttl time.Duration, clock health.Clock) *sessions {
	return &sessions{ttl: ttl, clock: clock, m: map[string]*session{}}
}

func (s *sessions) lookup(id string) *Endpoint {
	if id == "" {
		return nil
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.m[id]
	if !ok {
		return nil
	}
	if now.Sub(x.seen) > s.ttl {
		delete(s.m, id)
		return nil
	}
	return x.e
}

func (s *sessions) bind(id string, e *Endpoint) {
	if id == "" {
		return
	}
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) > 100000 {
		for k, x := range s.m { // bounded sweep of expired entries
			if now.Sub(x.seen) > s.ttl {
				delete(s.m, k)
			}
		}
	}
	s.m[id] = &session{e: e, seen: now}
}
