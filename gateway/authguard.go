package gateway

import (
	"container/list"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// The guard slows client password guessing on both fronts (RFC 1929 on
// the SOCKS5 front, Proxy-Authorization Basic on the HTTP front). Without
// it one client IP got ~3,000 verdicts a second per front. It counts
// recent failed logins per client address and per username; past
// guardThreshold failures a further failed answer waits, doubling from
// guardBaseDelay to guardMaxDelay, so a client that waits for its answers
// makes ~one guess every two seconds per connection.
//
// A correct password is never delayed, from any address: a delay on
// success would let an attacker who fails from a user's address (or as
// the user) slow or lock that user out. The price is that a client that
// gives up on an answer it does not get at once learns that it was a
// failure: the guard slows clients that wait for their verdict, and the
// connection caps (listen.max_connections, max_connections_per_ip) bound
// how many guesses are in flight at once. Missing credentials (the 407
// that starts a browser's challenge, a SOCKS5 client offering no
// username/password method) are no guess and are not counted.
const (
	// guardThreshold failures from one key (none more than guardWindow
	// after the one before) are answered at once; later ones wait.
	guardThreshold = 5
	// guardBaseDelay is the first delay; each further failure doubles it.
	guardBaseDelay = 100 * time.Millisecond
	// guardMaxDelay caps the delay (and so what a delayed answer holds:
	// its connection and goroutine, already counted by the caps).
	guardMaxDelay = 2 * time.Second
	// guardWindow: a key with no failure for this long is forgotten, and
	// at most one warn line per key is written per window.
	guardWindow = time.Minute
	// guardMaxKeys bounds the memory: the least recently failing key is
	// dropped first (an address that keeps failing stays in).
	guardMaxKeys = 10_000
	// guardMaxWarns bounds the per-key warn lines per window; the keys
	// past it are counted in one summary line.
	guardMaxWarns = 10
	// guardMargin is kept back from the handshake time left when a
	// delayed answer is bounded by it, to write the answer in.
	guardMargin = 100 * time.Millisecond
)

// authGuard holds the failure counts. One per Server, kept across
// reloads (the clients may change; the addresses guessing do not).
type authGuard struct {
	clock health.Clock
	// quit is closed by stop (Shutdown): delayed answers go out at once,
	// so a drain is never held by a client being slowed down.
	quit     chan struct{}
	stopOnce sync.Once
	// onWait, when set (tests, before serving), is called with each delay
	// just before its answer waits.
	onWait func(time.Duration)

	mu   sync.Mutex // guards the fields below
	keys map[string]*list.Element
	lru  list.List // of *guardEntry, the most recent failure at the front
	// The window of the warn lines' budget: lines written in it, and the
	// keys (and their failures) whose line was held back.
	warnFrom     time.Time
	warns        int
	heldKeys     int
	heldFailures int
}

// guardEntry is one client address (or /64 for IPv6) or username.
type guardEntry struct {
	key      string
	fails    int       // failures, each within guardWindow of the one before
	last     time.Time // the latest
	warned   time.Time // the last warn line (zero: none yet)
	unwarned int       // failures since that line (or since the first)
	since    time.Time // when unwarned began counting
}

// guardWarn is a warn line the caller writes after the lock is released
// (STYLE rule 40). held > 0 makes it the summary of held-back lines.
type guardWarn struct {
	key      string
	user     bool
	failures int
	dur      time.Duration
	delay    time.Duration
	held     int
}

func newAuthGuard(clock health.Clock) *authGuard {
	return &authGuard{clock: clock, quit: make(chan struct{}), keys: map[string]*list.Element{}}
}

// guardAddr is the key of a client address: the IP, or its /64 for IPv6,
// which one host usually holds whole (counting its addresses one by one
// would let it start afresh at each).
func guardAddr(host string) string {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.WithZone("").Prefix(64)
	return p.String()
}

// guardDelay is the delay of the answer to a key's fails-th failure:
// none up to guardThreshold, then guardBaseDelay doubling to
// guardMaxDelay (the shift is bounded before it can overflow).
func guardDelay(fails int) time.Duration {
	n := fails - guardThreshold
	if n <= 0 {
		return 0
	}
	d := guardBaseDelay
	for i := 1; i < n && d < guardMaxDelay; i++ {
		d *= 2
	}
	return min(d, guardMaxDelay)
}

// fail records a failed login from host (the client's IP) as user (its
// base name as logged: a configured name, "(unknown)", or "" for none)
// and returns how long its answer waits and the warn lines due.
func (g *authGuard) fail(host, user string) (time.Duration, []guardWarn) {
	now := g.clock.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	g.expire(now)
	var warns []guardWarn
	if !g.warnFrom.IsZero() && now.Sub(g.warnFrom) >= guardWindow {
		if g.heldKeys > 0 {
			warns = append(warns, guardWarn{held: g.heldKeys, failures: g.heldFailures, dur: now.Sub(g.warnFrom)})
		}
		g.warnFrom, g.warns, g.heldKeys, g.heldFailures = time.Time{}, 0, 0, 0
	}
	var delay time.Duration
	for _, k := range [...]struct {
		key, name string
		user      bool
	}{{"addr " + guardAddr(host), guardAddr(host), false}, {"user " + user, user, true}} {
		if k.user && user == "" {
			continue
		}
		e := g.entry(k.key, now)
		e.fails++
		e.unwarned++
		e.last = now
		d := guardDelay(e.fails)
		delay = max(delay, d)
		if d == 0 || (!e.warned.IsZero() && now.Sub(e.warned) < guardWindow) {
			continue
		}
		if g.warnFrom.IsZero() {
			g.warnFrom = now
		}
		if g.warns >= guardMaxWarns {
			g.heldKeys++
			g.heldFailures += e.unwarned
		} else {
			g.warns++
			warns = append(warns, guardWarn{key: k.name, user: k.user, failures: e.unwarned, dur: now.Sub(e.since), delay: d})
		}
		e.warned, e.since, e.unwarned = now, now, 0
	}
	return delay, warns
}

// entry returns key's entry, made the most recent; a new one may push
// the least recent out (mu held).
func (g *authGuard) entry(key string, now time.Time) *guardEntry {
	if el, ok := g.keys[key]; ok {
		g.lru.MoveToFront(el)
		e := el.Value.(*guardEntry)
		if now.Sub(e.last) >= guardWindow {
			*e = guardEntry{key: key, since: now, warned: e.warned}
		}
		return e
	}
	for g.lru.Len() >= guardMaxKeys {
		g.drop(g.lru.Back())
	}
	e := &guardEntry{key: key, since: now}
	g.keys[key] = g.lru.PushFront(e)
	return e
}

// expire drops the keys that have not failed for guardWindow: they are
// at the back (mu held).
func (g *authGuard) expire(now time.Time) {
	for el := g.lru.Back(); el != nil && now.Sub(el.Value.(*guardEntry).last) >= guardWindow; el = g.lru.Back() {
		g.drop(el)
	}
}

func (g *authGuard) drop(el *list.Element) {
	delete(g.keys, el.Value.(*guardEntry).key)
	g.lru.Remove(el)
}

// size is the number of keys tracked.
func (g *authGuard) size() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lru.Len()
}

// wait holds a failed answer for d, or less: until done is closed (the
// client left, the request was cut) or the drain began (stop).
func (g *authGuard) wait(d time.Duration, done <-chan struct{}) {
	if d <= 0 {
		return
	}
	after := g.clock.After(d)
	if g.onWait != nil {
		g.onWait(d) // after After: a test that advances the clock now fires it
	}
	select {
	case <-after:
	case <-g.quit:
	case <-done:
	}
}

// stop releases every delayed answer, now and later (Shutdown).
func (g *authGuard) stop() { g.stopOnce.Do(func() { close(g.quit) }) }

// authFailed counts a wrong password on front from the client at remote
// (host:port) as user (a loginUser name), writes the warn lines due, and
// holds the failed answer: by the guard's delay, at most budget (the
// handshake time left, so the answer still goes out within it), and not
// past done or the drain. The password is never seen here.
func (s *Server) authFailed(front, remote, user string, budget time.Duration, done <-chan struct{}) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	d, warns := s.guard.fail(host, user)
	for _, w := range warns {
		switch {
		case w.held > 0:
			s.log.Warn().Int("clients", w.held).Int("failures", w.failures).Str("dur", w.dur.Round(time.Second).String()).
				Msg("client authentication failing from many clients: per-client lines held back (answers delayed)")
		case w.user:
			s.log.Warn().Str("user", w.key).Int("failures", w.failures).Str("dur", w.dur.Round(time.Second).String()).
				Str("delay", w.delay.String()).Msg("client authentication failing for a user (answers delayed)")
		default:
			s.log.Warn().Str("client", w.key).Int("failures", w.failures).Str("dur", w.dur.Round(time.Second).String()).
				Str("delay", w.delay.String()).Msg("client authentication failing (answers delayed)")
		}
	}
	d = min(d, budget)
	answer := "immediate"
	if d > 0 {
		answer = "delayed"
	}
	s.metrics.authFailure(front, answer)
	s.guard.wait(d, done)
}
