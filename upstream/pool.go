package upstream

import (
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// SlowStart is the ramp of an upstream re-admitted after a failure (its
	// probe passed, or its cooldown ended with no probe configured); an
	// upstream that did not fail (a new one, one eligible before a restart)
	// has none.
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
	// for idempotent requests, 300-599 (a success is never retried).
	// Default none.
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

// Validate reports every invalid field, joined (errors.Join); each is a
// *KeyError naming its TOML key, so that a config check can point at the
// key's line.
func (c PoolConfig) Validate() error {
	var errs []error
	bad := func(key, format string, a ...any) {
		errs = append(errs, health.KeyErr("pool."+key, format, a...))
	}
	if _, err := newStrategy(c.WithDefaults().Strategy); err != nil {
		bad("strategy", "%w", err)
	}
	if c.MaxAttempts < 0 {
		bad("max_attempts", "must be >= 1 (got %d)", c.MaxAttempts)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"wait_for_upstream", c.WaitForUpstream},
		{"connect_timeout", c.ConnectTimeout},
		{"handshake_timeout", c.HandshakeTimeout},
		{"session_ttl", c.SessionTTL},
	} {
		if d.v < 0 {
			bad(d.key, "must not be negative (got %s)", d.v)
		}
	}
	if c.RetryBodyLimit < 0 {
		bad("retry_body_limit", "must not be negative (got %d)", c.RetryBodyLimit)
	}
	for _, s := range c.RetryStatuses {
		switch {
		case s < 100 || s > 599:
			bad("retry_statuses", "%d is not an HTTP status", s)
		case s < 300:
			// 200 retried every successful idempotent request (and a 1xx
			// never reaches the retry: it is no final answer).
			bad("retry_statuses", "%d is an interim or success status, not a ban (want 300-599)", s)
		}
	}
	return errors.Join(errs...)
}

// KeyError is one invalid config key ("pool.max_attempts"): health's.
type KeyError = health.KeyError

// Pool is the set of endpoints client connections are spread over. The
// endpoint set is swapped atomically on reload; health lives in the
// Tracker, keyed by endpoint identity, so it survives reloads, and the
// per-identity counters (active tunnels, latency) are carried over by
// Update.
type Pool struct {
	// cfg and strategy are replaced together by SetConfig; readers load
	// the pointer once per operation.
	settings atomic.Pointer[poolSettings]
	tr       *health.Tracker
	clock    health.Clock
	log      zerolog.Logger
	sessions *sessions

	set     atomic.Pointer[set]
	waiting atomic.Int64

	// fleet is set once by SetFleet before serving (nil: single process).
	// share is how many instances split every endpoint's max_conns and
	// rate (SetInstances; 0 and 1 mean this instance has them whole).
	fleet Fleet
	share atomic.Int64

	// beforeDial, set once by SetBeforeDial before serving, runs before a
	// tunnel dials an endpoint that has max_conns (see SetBeforeDial).
	beforeDial func(*Endpoint)

	// lines holds the clients waiting for limited endpoints, first come
	// first served (limits.go): a slot freed on an endpoint with a line
	// goes to its head.
	lines *waitLines

	// freed is closed and replaced when a tunnel ends on an endpoint with
	// max_conns and no line while some client is registered in
	// slotWaiters: a client that found more limited endpoints than it
	// lines up for (maxLines) is woken for the others so.
	freed       atomic.Pointer[chan struct{}]
	freedMu     sync.Mutex // serialises the replacement of freed
	slotWaiters atomic.Int64

	mu sync.Mutex // serialises Update
	// mu guards the fields below.
	byKey   map[string]*Endpoint
	gone    map[string]goneLoad // counters of removed endpoints, by identity (see Update)
	dialCfg DialConfig
	dialGen uint64 // bumped when dialCfg changes: endpoints of older generations are rebuilt
	slab    []load // unused loads of the current chunk, see newLoad
}

// goneLoad is what Update keeps of an endpoint it removed: the counters
// its open tunnels still release, and its rate bucket. An upstream put
// back gets them again, as the tracker gives it its record back: the
// tunnels opened before its removal still count against its max_conns,
// and the tunnels it started in the last second against its rate.
type goneLoad struct {
	ld    *load
	limit *rateLimiter // nil when rate was 0
	rate  float64
	at    time.Time // removal, on the pool's clock
}

// goneKeep is how long Update keeps a removed endpoint's counters with no
// tunnel open: as long as the tracker keeps its record (health's
// goneKeep). While its tunnels are open they are kept whatever their age,
// since an upstream put back must count them against its max_conns.
// goneMax bounds how many idle ones are kept, as health bounds records.
const (
	goneKeep = 15 * time.Minute
	goneMax  = 200_000
)

// loadChunk is how many loads newLoad allocates at once.
const loadChunk = 1024

// newLoad returns a zero load for a new identity. Loads are carved from
// chunks so that those of a large pool sit together in memory: ranking a
// random sample (least-conn, lowest-latency) then costs cache hits rather
// than one miss per candidate. A chunk stays alive while any of its loads
// does (a few KiB per 1024 identities). Caller holds p.mu.
func (p *Pool) newLoad() *load {
	if len(p.slab) == 0 {
		p.slab = make([]load, loadChunk)
	}
	l := &p.slab[0]
	p.slab = p.slab[1:]
	return l
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
	p := &Pool{tr: tr, clock: clock, log: log, byKey: map[string]*Endpoint{}, gone: map[string]goneLoad{}, dialCfg: dial,
		lines: &waitLines{}}
	p.settings.Store(&poolSettings{cfg: cfg, strategy: st})
	p.sessions = newSessions(cfg.SessionTTL, maxSessions, clock)
	p.set.Store(newSet(nil))
	ch := make(chan struct{})
	p.freed.Store(&ch)
	return p, nil
}

// poolSettings is one immutable generation of the pool's configuration.
type poolSettings struct {
	cfg      PoolConfig
	strategy strategy
}

// Config returns the pool's effective configuration.
func (p *Pool) Config() PoolConfig { return p.settings.Load().cfg }

// SetConfig applies a reloaded [pool] table. Strategy, max_attempts,
// wait_for_upstream, retry settings and session_ttl apply to the next
// request; connect and handshake timeouts to dialers built from now on,
// which is every upstream, since the dialers are rebuilt at once.
// Requests already in their attempt loop finish with the settings they
// started with. An invalid config returns an error and changes nothing.
func (p *Pool) SetConfig(cfg PoolConfig) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	st, _ := newStrategy(cfg.Strategy)
	old := p.settings.Load()
	if old.cfg.Strategy == cfg.Strategy {
		st = old.strategy // keep its state (round-robin cursor, latency choice)
	}
	p.settings.Store(&poolSettings{cfg: cfg, strategy: st})
	p.sessions.setTTL(cfg.SessionTTL)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dialCfg.ConnectTimeout != cfg.ConnectTimeout || p.dialCfg.HandshakeTimeout != cfg.HandshakeTimeout {
		p.dialCfg.ConnectTimeout, p.dialCfg.HandshakeTimeout = cfg.ConnectTimeout, cfg.HandshakeTimeout
		p.dialGen++ // every endpoint gets a new dialer at the next Update
	}
	return nil
}

// Tracker returns the pool's health tracker.
func (p *Pool) Tracker() *health.Tracker { return p.tr }

// Endpoints returns the current endpoint set (do not modify).
func (p *Pool) Endpoints() []*Endpoint { return p.set.Load().eps }

// Waiting returns how many clients are waiting for an eligible endpoint.
func (p *Pool) Waiting() int64 { return p.waiting.Load() }

// Lookup returns the endpoint named name, or nil.
func (p *Pool) Lookup(name string) *Endpoint { return p.set.Load().byName[name] }

// Update replaces the endpoint set with specs. Endpoints whose identity is
// unchanged keep their health record (state, counters, history), their
// open-tunnel count and latency, and their rate bucket when the rate did
// not change; an entry whose whole spec is unchanged keeps its *Endpoint.
// New ones are added to the tracker; removed ones are dropped from it. An
// identity removed and put back within goneKeep, or while tunnels opened
// before its removal are still open, gets its open-tunnel count, latency
// and (same rate) rate bucket back, as the tracker gives it its record
// back: a config saved in two writes must not let max_conns or rate be
// exceeded. It returns the names added and removed (one put back is
// added).
//
// Unnamed specs are named host:port, or user@host:port when several share
// a host:port (session-in-username providers: identity includes the
// username, so they are distinct endpoints).
func (p *Pool) Update(specs []Spec) (added, removed []string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	names := specNames(specs)
	next := make([]*Endpoint, 0, len(specs))
	keys := make(map[string]bool, len(specs))
	var creds []*health.Record // records whose credentials changed
	for i, s := range specs {
		if err := ValidateURL(s.URL); err != nil {
			return nil, nil, err
		}
		key := Identity(s.URL)
		if keys[key] {
			return nil, nil, fmt.Errorf("upstream %s is listed twice", Redact(s.URL))
		}
		keys[key] = true
		w := s.Weight
		if w <= 0 {
			w = 1
		}
		old := p.byKey[key]
		if old != nil && old.dialGen == p.dialGen && old.same(s, names[i], w) && p.tr.Add(key, old.Name, probeDialer{old}, s.Disabled) == old.rec {
			next = append(next, old)
			continue
		}
		dc := p.dialCfg
		dc.SOCKS5Pipeline = s.Pipeline
		d, err := NewDialer(s.URL, dc)
		if err != nil {
			return nil, nil, err
		}
		e := &Endpoint{Name: names[i], Key: key, URL: s.URL, Tags: s.Tags, Weight: w, MaxConns: s.MaxConns, Rate: s.Rate, dialer: d, clock: p.clock, dialGen: p.dialGen, pipeline: s.Pipeline}
		switch {
		case old != nil:
			// Open tunnels keep counting against the same identity.
			e.ld = old.ld
			if old.Rate == s.Rate {
				e.limit = old.limit
			}
		default:
			if g, ok := p.gone[key]; ok {
				// Removed by an earlier Update: its open tunnels and
				// its last second's starts still count.
				e.ld = g.ld
				if g.rate == s.Rate {
					e.limit = g.limit
				}
			} else {
				e.ld = p.newLoad()
			}
			added = append(added, e.Name)
		}
		if s.Rate > 0 && e.limit == nil {
			e.limit = newRateLimiter(s.Rate, p.clock)
		}
		e.rec = p.tr.Add(key, e.Name, probeDialer{e}, s.Disabled)
		if old != nil && old.URL.User.String() != s.URL.User.String() {
			old.credsReplaced.Store(true)
			creds = append(creds, e.rec)
		}
		next = append(next, e)
	}
	now := p.clock.Now()
	for _, old := range p.set.Load().eps { // in pool order, so logs list them as the config did
		if !keys[old.Key] {
			removed = append(removed, old.Name)
			p.tr.Remove(old.Key)
			p.gone[old.Key] = goneLoad{ld: old.ld, limit: old.limit, rate: old.Rate, at: now}
		}
	}
	p.byKey = make(map[string]*Endpoint, len(next))
	for _, e := range next {
		p.byKey[e.Key] = e
		delete(p.gone, e.Key) // back: its counters are in use again
	}
	p.sweepGone(now)
	s := newSet(next)
	s.bind(p.tr)
	p.set.Store(s)
	// Only now, with the endpoints that dial with the new credentials in
	// place: a record probed with them and passing before (bug) woke
	// waiters that picked the old endpoint and dialled with the old
	// password, failing auth_rejected.
	for _, r := range creds {
		p.tr.CredentialsChanged(r)
	}
	if p.lines.active() {
		// A new max_conns or rate may leave room now: the clients at the
		// head of a line look (each passes it on when it is served).
		p.lines.wakeAll()
	}
	return added, removed, nil
}

// sweepGone drops the kept counters of removed endpoints that have no
// tunnel open and were removed goneKeep or more ago, then, above goneMax,
// arbitrary ones with no tunnel open. Caller holds p.mu.
func (p *Pool) sweepGone(now time.Time) {
	for k, g := range p.gone {
		if g.ld.active.Load() <= 0 && now.Sub(g.at) >= goneKeep {
			delete(p.gone, k)
		}
	}
	for k, g := range p.gone {
		if len(p.gone) <= goneMax {
			break
		}
		if g.ld.active.Load() <= 0 {
			delete(p.gone, k)
		}
	}
}

// same reports whether e was built from a spec equal to s (credentials
// included) under the name name and weight w, so it can be kept as is.
func (e *Endpoint) same(s Spec, name string, w int) bool {
	return e.Name == name && e.URL.String() == s.URL.String() && slices.Equal(e.Tags, s.Tags) &&
		e.Weight == w && e.MaxConns == s.MaxConns && e.Rate == s.Rate && e.pipeline == s.Pipeline
}

// specNames returns each spec's display name: its own, else host:port, or
// user@host:port when several unnamed specs share a host:port; a remaining
// clash gets a #N suffix.
func specNames(specs []Spec) []string {
	hosts := map[string]int{}
	used := map[string]bool{}
	for _, s := range specs {
		if s.Name == "" {
			hosts[strings.ToLower(s.URL.Host)]++
		} else {
			used[s.Name] = true
		}
	}
	names := make([]string, len(specs))
	for i, s := range specs {
		if s.Name != "" {
			names[i] = s.Name
			continue
		}
		base := defaultName(s.URL, hosts[strings.ToLower(s.URL.Host)] > 1)
		name := base
		for n := 2; used[name]; n++ {
			name = fmt.Sprintf("%s#%d", base, n)
		}
		used[name] = true
		names[i] = name
	}
	return names
}

// release ends one tunnel's use of e (the decrement matching the reserve
// of the pick that returned e) and wakes the client the freed slot is
// for: the head of e's line, else every client registered in slotWaiters.
func (p *Pool) release(e *Endpoint) {
	n := e.ld.active.Add(-1)
	if e.MaxConns > 0 && n < connShare(int64(e.MaxConns), p.share.Load()) {
		if p.lines.active() && p.lines.wakeHead(e.ld) {
			return
		}
		if p.slotWaiters.Load() > 0 {
			p.wakeSlotWaiters()
		}
	}
}

// wakeSlotWaiters wakes every client waiting for a max_conns slot.
func (p *Pool) wakeSlotWaiters() {
	p.freedMu.Lock()
	old := p.freed.Load()
	ch := make(chan struct{})
	p.freed.Store(&ch)
	p.freedMu.Unlock()
	close(*old)
}

// SetBeforeDial installs f, run before Dial opens a tunnel's connection to
// an endpoint with max_conns. The gateway's plain-HTTP forwarding keeps
// idle connections to upstreams outside the pool's count; f closes enough
// of them that the connections open to the endpoint stay within its
// max_conns. Call it before serving.
func (p *Pool) SetBeforeDial(f func(*Endpoint)) { p.beforeDial = f }
