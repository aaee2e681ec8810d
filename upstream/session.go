package upstream

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// Sticky sessions: the table (sessions), its fleet refresh and the
// bindings other instances report. limits.go holds the rest of the
// fleet link (Fleet, SetFleet, SetInstances).

// RefreshSessions reports to the fleet, as refreshes, the sessions held
// here now (a tunnel or a forwarded request of theirs is open) whose last
// report is at least ttl/4 old: without it a session in use here for
// longer than its TTL expired in the fleet's store and on the other
// instances, which then bound it anew elsewhere. The fleet calls it
// periodically (at most once a second is plenty); it walks the table at
// most once per ttl/8 and never waits on the fleet.
func (p *Pool) RefreshSessions() {
	if p.fleet == nil {
		return
	}
	ttl := p.sessions.ttl()
	for _, b := range p.sessions.heldDue() {
		p.fleet.SessionBound(b.id, b.key, b.key, ttl)
	}
}

// SessionKey returns the identity key of the endpoint session id (the key
// SessionID makes of a user's session) is bound to here, "" when it is
// unknown or expired (for status and tests).
func (p *Pool) SessionKey(id string) string { return p.sessions.lookup(id) }

// ApplySession binds sticky session id to the endpoint with identity key
// as another instance reported it (fleet mode), left being how long the
// binding lives without use. With fill, an id this instance holds already
// is left alone (a bulk load must not undo a newer local move). The key
// need not be one of this instance's endpoints (a pick then ignores it).
func (p *Pool) ApplySession(id, key string, left time.Duration, fill bool) {
	if id == "" || key == "" || left <= 0 {
		return
	}
	name := key
	s := p.set.Load()
	if i, ok := s.byKey[key]; ok {
		name = s.eps[i].Name
	}
	p.sessions.apply(id, key, name, left, fill)
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
// that serves them. An entry slides forward on each pick, success and
// tunnel end, never expires while a tunnel of the session is open, and
// expires after ttl without any of these. Keys (not *Endpoint) are stored
// so that an entry survives a reload that rebuilds the endpoint values.
//
// A new session is bound at its first pick (claim), before the attempt
// succeeds: its requests that start meanwhile follow that binding instead
// of each picking its own upstream (issue: eight parallel first requests
// went out through four). Such a binding is provisional until an attempt
// on it succeeds (bind); if the attempt fails, the retry's pick moves it,
// as a failure moves any session.
//
// Each binding to a key has a generation, new whenever the key changes
// (or the entry is made anew). An attempt notes the generation it was
// picked under, and its answer binds only while that generation is
// current: an answer that arrives after the session moved (its upstream
// failed for another request meanwhile) does not move it back.
type sessions struct {
	ttlNs  atomic.Int64  // time.Duration; changed by a reload
	gens   atomic.Uint64 // the last generation given out (0 is none)
	walkMu sync.Mutex    // guards walked
	walked time.Time     // heldDue's last walk (zero: none yet)
	max    int           // entries held at most, all shards together
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
	key  string    // endpoint identity
	gen  uint64    // the binding's generation: new when key changes
	name string    // endpoint name when bound, for the move log line
	seen time.Time // last pick, success or tunnel end
	pub  time.Time // last report to the fleet (or from it): refreshes are throttled
	// open counts the session's attempts in use now (from pick to
	// Attempts.Release: tunnels, forwarded requests, on any endpoint):
	// while there is one the session is in use and does not expire
	// (issue: with session_ttl 3s, a tunnel held 5s lost its session at
	// 3s; a forwarded request lost it the same way).
	open int32
	// prov is set while the binding is a pick's (claim) that no attempt
	// has confirmed yet; from and fromKey then name the confirmed binding
	// it replaced ("" for none), which the move log names once confirmed.
	prov    bool
	from    string
	fromKey string
}

// expired reports whether x is past its ttl: no tunnel open and unused
// for longer than ttl.
func (x *session) expired(now time.Time, ttl time.Duration) bool {
	return x.open <= 0 && now.Sub(x.seen) > ttl
}

// confirmed returns the name and key of the binding x stands for once
// confirmed: x's own, or for a provisional x the one it replaced.
func (x *session) confirmed() (name, key string) {
	if x.prov {
		return x.from, x.fromKey
	}
	return x.name, x.key
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
	key, _ := s.get(id, false)
	return key
}

// follow is lookup for a pick of the session: a live binding slides. It
// also returns the binding's generation (0 with no binding).
func (s *sessions) follow(id string) (key string, gen uint64) { return s.get(id, true) }

func (s *sessions) get(id string, use bool) (string, uint64) {
	if id == "" {
		return "", 0
	}
	now := s.clock.Now()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x, ok := sh.m[id]
	if !ok {
		return "", 0
	}
	if x.expired(now, s.ttl()) {
		delete(sh.m, id)
		return "", 0
	}
	if use {
		x.seen = now
		sh.m[id] = x
	}
	return x.key, x.gen
}

// nextGen returns a generation never given out before.
func (s *sessions) nextGen() uint64 { return s.gens.Add(1) }

// hold counts one more attempt of id in use (see session.open), until
// release. An id with no entry (evicted meanwhile) is not held: hold
// reports whether it was.
func (s *sessions) hold(id string) bool {
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x, ok := sh.m[id]
	if !ok {
		return false
	}
	x.open++
	sh.m[id] = x
	return true
}

// claim binds id to e provisionally for a pick that found id bound to
// expect ("" for unbound) and could not use that: unless the binding has
// changed meanwhile (another request of the session claimed or moved it),
// id is now bound to e. It returns the key id is bound to afterwards, and
// that binding's generation.
func (s *sessions) claim(id, expect string, e *Endpoint) (string, uint64) {
	now := s.clock.Now()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, had := sh.m[id]
	live := had && !old.expired(now, s.ttl())
	if live && old.key != expect {
		return old.key, old.gen
	}
	if !had {
		s.makeRoom(sh, now)
	}
	x := session{key: e.Key, gen: s.nextGen(), name: e.Name, seen: now, open: old.open, prov: true}
	if live {
		x.from, x.fromKey = old.confirmed()
		x.pub = old.pub
		if old.key == e.Key {
			x.gen = old.gen // the same binding, made provisional again
		}
	}
	sh.m[id] = x
	return e.Key, x.gen
}

// bind records that e served id now (sliding the TTL), for an attempt
// picked while id's binding had generation gen (0: none). A live binding
// of another generation was made after that pick (another request of the
// session moved it, or another instance did): it stays as it is, so that
// a late answer never undoes a move. When id was bound (and confirmed) to
// another live endpoint it returns that endpoint's name and moved=true,
// for the caller to log after the lock is released. report is true when
// the fleet should learn of the binding: it is new or moved, or its last
// report is at least ttl/4 old; fromKey is then the key the fleet's
// binding is to have had (see Fleet.SessionBound): e's own for a refresh,
// the one replaced for a move, "" for a new binding.
func (s *sessions) bind(id string, e *Endpoint, gen uint64) (from, fromKey string, moved, report bool) {
	return s.bindOver(id, e, gen, nil)
}

// bindOver is bind, where mine (when not nil) names the generations of
// provisional bindings the caller's own request claimed after gen's pick
// (see Attempts.bindHeld): those are no move by another request, and are
// replaced.
func (s *sessions) bindOver(id string, e *Endpoint, gen uint64, mine func(uint64) bool) (from, fromKey string, moved, report bool) {
	if id == "" {
		return "", "", false, false
	}
	now := s.clock.Now()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, had := sh.m[id]
	live := had && !old.expired(now, s.ttl())
	switch {
	case !had:
		s.makeRoom(sh, now)
	case live && old.gen != gen && !(old.prov && mine != nil && mine(old.gen)):
		// Moved since this attempt was picked: the move stands.
		return "", "", false, false
	case old.key == e.Key:
		// The common case: slide the TTL in place.
		report = now.Sub(old.pub) >= s.ttl()/4
		if report {
			fromKey = e.Key // a refresh
		}
		if old.prov {
			// The first success on a pick's binding confirms it.
			if old.fromKey != "" && old.fromKey != e.Key {
				from, moved = old.from, true
			}
			old.prov, old.from, report, fromKey = false, "", true, old.fromKey
			old.fromKey = ""
		}
		if !live {
			old.gen = s.nextGen()
		}
		old.name, old.seen = e.Name, now
		if report {
			old.pub = now
		}
		sh.m[id] = old
		return from, fromKey, moved, report
	case live:
		name, key := old.confirmed()
		if key != "" && key != e.Key {
			from, moved = name, true
		}
		fromKey = key
	}
	sh.m[id] = session{key: e.Key, gen: s.nextGen(), name: e.Name, seen: now, pub: now, open: old.open}
	return from, fromKey, moved, true
}

// heldBinding is a session binding heldDue returns.
type heldBinding struct{ id, key string }

// heldDue returns the confirmed bindings held now (open > 0) whose last
// report to the fleet is at least ttl/4 old, and marks them reported. It
// walks the table at most once per ttl/8 (nil in between).
func (s *sessions) heldDue() []heldBinding {
	now := s.clock.Now()
	ttl := s.ttl()
	s.walkMu.Lock()
	due := s.walked.IsZero() || now.Sub(s.walked) >= ttl/8
	if due {
		s.walked = now
	}
	s.walkMu.Unlock()
	if !due {
		return nil
	}
	var out []heldBinding
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for id, x := range sh.m {
			if x.open > 0 && !x.prov && now.Sub(x.pub) >= ttl/4 {
				x.pub = now
				sh.m[id] = x
				out = append(out, heldBinding{id, x.key})
			}
		}
		sh.mu.Unlock()
	}
	return out
}

// release ends the use of one attempt of id that hold counted: the
// session slides from now. It returns the key to report to the fleet when the
// binding is confirmed and its last report is at least ttl/4 old, else "".
func (s *sessions) release(id string) (report string) {
	now := s.clock.Now()
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x, ok := sh.m[id]
	if !ok {
		return "" // evicted meanwhile
	}
	if x.open > 0 {
		x.open--
	}
	x.seen = now
	if !x.prov && now.Sub(x.pub) >= s.ttl()/4 {
		x.pub, report = now, x.key
	}
	sh.m[id] = x
	return report
}

// apply records a binding another instance reported: id is bound to key
// (named name here) and lives left more without use. With fill, a live
// entry already held is kept as is.
func (s *sessions) apply(id, key, name string, left time.Duration, fill bool) {
	now := s.clock.Now()
	ttl := s.ttl()
	seen := now.Add(min(left, ttl) - ttl) // expires left from now
	sh := s.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	old, had := sh.m[id]
	live := had && !old.expired(now, ttl)
	switch {
	case live && fill:
		return
	case live && old.key == key:
		if seen.After(old.seen) {
			old.seen = seen
		}
		old.pub = now // the fleet has just heard of it: no need to report it again soon
		old.prov, old.from, old.fromKey = false, "", ""
		sh.m[id] = old
		return
	case !had:
		s.makeRoom(sh, now)
	}
	sh.m[id] = session{key: key, gen: s.nextGen(), name: name, seen: seen, pub: seen, open: old.open}
}

// sessionEvictTries is how many entries makeRoom looks at for one with no
// tunnel open before it evicts any.
const sessionEvictTries = 8

// makeRoom sweeps sh's expired entries when a sweep is due, then evicts one
// entry if sh is still full, preferably one with no tunnel open. Caller
// holds sh.mu.
func (s *sessions) makeRoom(sh *sessionShard, now time.Time) {
	if now.Sub(sh.lastSweep) >= min(s.ttl(), sessionSweepEvery) {
		for k, x := range sh.m {
			if x.expired(now, s.ttl()) {
				delete(sh.m, k)
			}
		}
		sh.lastSweep = now
	}
	if len(sh.m) >= max(s.max/sessionShards, 1) {
		victim, tries := "", 0
		for k, x := range sh.m { // map order is unspecified: an arbitrary victim
			if victim == "" || x.open <= 0 {
				victim = k
			}
			if tries++; x.open <= 0 || tries >= sessionEvictTries {
				break
			}
		}
		delete(sh.m, victim)
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
