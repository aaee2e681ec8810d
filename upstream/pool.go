package upstream

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
)

// PoolConfig is the [pool] table.
type PoolConfig struct {
	// Strategy picks among eligible endpoints: round-robin (default),
	// random, least-conn, weighted, lowest-latency.
	Strategy string `toml:"strategy"`
	// MaxAttempts is how many distinct upstreams one client connection may
	// try before it fails. Default 3.
	MaxAttempts int `toml:"max_attempts"`
	// WaitForUpstream is how long a client waits for an eligible upstream
	// when none is, before it gets a clear failure. Default 10s.
	WaitForUpstream time.Duration `toml:"wait_for_upstream"`
	// SlowStart is the ramp after a recovered upstream's probe passes.
	// Default 30s; "0s" keeps the default, a negative value disables it.
	SlowStart time.Duration `toml:"slow_start"`
	// StartEligible makes new upstreams serve before their first probe.
	StartEligible bool `toml:"start_eligible"`
	// ConnectTimeout bounds the TCP connect to an upstream. Default 5s.
	ConnectTimeout time.Duration `toml:"connect_timeout"`
	// HandshakeTimeout bounds the proxy handshake. Default 10s.
	HandshakeTimeout time.Duration `toml:"handshake_timeout"`
	// SessionTTL is how long a sticky session keeps its upstream without
	// use (sliding). Default 10m.
	SessionTTL time.Duration `toml:"session_ttl"`
	// RetryStatuses are plain-HTTP statuses retried on another upstream
	// for idempotent requests. Default none.
	RetryStatuses []int `toml:"retry_statuses"`
	// RetryBodyLimit is the largest request body buffered so that a
	// request with a body can be retried. Default 64 KiB.
	RetryBodyLimit int64 `toml:"retry_body_limit"`
}

// WithDefaults returns c with zero values replaced by defaults.
func (c PoolConfig) WithDefaults() PoolConfig {
	if c.Strategy == "" {
		c.Strategy = "round-robin"
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.WaitForUpstream == 0 {
		c.WaitForUpstream = 10 * time.Second
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.SessionTTL == 0 {
		c.SessionTTL = 10 * time.Minute
	}
	if c.RetryBodyLimit == 0 {
		c.RetryBodyLimit = 64 << 10
	}
	return c
}

// Validate reports the first invalid field.
func (c PoolConfig) Validate() error {
	if _, err := newStrategy(c.WithDefaults().Strategy); err != nil {
		return err
	}
	switch {
	case c.MaxAttempts < 0:
		return errors.New("pool.max_attempts must be >= 1")
	case c.WaitForUpstream < 0:
		return errors.New("pool.wait_for_upstream must not be negative")
	case c.ConnectTimeout < 0, c.HandshakeTimeout < 0:
		return errors.New("pool timeouts must not be negative")
	}
	for _, s := range c.RetryStatuses {
		if s < 100 || s > 599 {
			return fmt.Errorf("pool.retry_statuses: %d is not an HTTP status", s)
		}
	}
	return nil
}

// Pool is the set of endpoints client connections are spread over. The
// endpoint set is swapped atomically on reload; health lives in the
// Tracker, keyed by endpoint identity, so it survives reloads.
type Pool struct {
	cfg      PoolConfig
	tr       *health.Tracker
	clock    health.Clock
	log      zerolog.Logger
	strategy Strategy
	sessions *sessions

	set     atomic.Pointer[[]*Endpoint]
	waiting atomic.Int64

	mu      sync.Mutex // serialises Update
	byKey   map[string]*Endpoint
	dialCfg DialConfig
}

// NewPool returns a pool using tr for health. A nil clock means real time.
func NewPool(cfg PoolConfig, dial DialConfig, tr *health.Tracker, clock health.Clock, log zerolog.Logger) (*Pool, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = health.RealClock()
	}
	st, _ := newStrategy(cfg.Strategy)
	if dial.ConnectTimeout == 0 {
		dial.ConnectTimeout = cfg.ConnectTimeout
	}
	if dial.HandshakeTimeout == 0 {
		dial.HandshakeTimeout = cfg.HandshakeTimeout
	}
	p := &Pool{cfg: cfg, tr: tr, clock: clock, log: log, strategy: st, byKey: map[string]*Endpoint{}, dialCfg: dial}
	p.sessions = newSessions(cfg.SessionTTL, clock)
	empty := []*Endpoint{}
	p.set.Store(&empty)
	return p, nil
}

// Config returns the pool's effective configuration.
func (p *Pool) Config() PoolConfig { return p.cfg }

// Tracker returns the pool's health tracker.
func (p *Pool) Tracker() *health.Tracker { return p.tr }

// Endpoints returns the current endpoint set (do not modify).
func (p *Pool) Endpoints() []*Endpoint { return *p.set.Load() }

// Waiting returns how many clients are waiting for an eligible endpoint.
func (p *Pool) Waiting() int64 { return p.waiting.Load() }

// Lookup returns the endpoint named name, or nil.
func (p *Pool) Lookup(name string) *Endpoint {
	for _, e := range p.Endpoints() {
		if e.Name == name {
			return e
		}
	}
	return nil
}

// Update replaces the endpoint set with specs. Endpoints whose identity is
// unchanged keep their health record (state, counters, history); new ones
// are added to the tracker; removed ones are dropped from it. It returns
// the names added and removed.
func (p *Pool) Update(specs []Spec) (added, removed []string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	next := make([]*Endpoint, 0, len(specs))
	keys := make(map[string]bool, len(specs))
	for _, s := range specs {
		if err := ValidateURL(s.URL); err != nil {
			return nil, nil, err
		}
		key := Identity(s.URL)
		if keys[key] {
			return nil, nil, fmt.Errorf("upstream %s is listed twice", Redact(s.URL))
		}
		keys[key] = true
		d, err := NewDialer(s.URL, p.dialCfg)
		if err != nil {
			return nil, nil, err
		}
		w := s.Weight
		if w <= 0 {
			w = 1
		}
		e := &Endpoint{Name: s.Name, Key: key, URL: s.URL, Tags: s.Tags, Weight: w, MaxConns: s.MaxConns, Rate: s.Rate, dialer: d}
		if e.Name == "" {
			e.Name = defaultName(s.URL, false)
		}
		if s.Rate > 0 {
			e.limit = newRateLimiter(s.Rate, p.clock)
		}
		if old, ok := p.byKey[key]; ok {
			// Open tunnels keep counting against the same endpoint.
			e.active.Store(old.active.Load())
		} else {
			added = append(added, e.Name)
		}
		e.rec = p.tr.Add(key, e.Name, d, s.Disabled)
		next = append(next, e)
	}
	for key, old := range p.byKey {
		if !keys[key] {
			removed = append(removed, old.Name)
			p.tr.Remove(key)
		}
	}
	p.byKey = make(map[string]*Endpoint, len(next))
	for _, e := range next {
		p.byKey[e.Key] = e
	}
	p.set.Store(&next)
	return added, removed, nil
}
