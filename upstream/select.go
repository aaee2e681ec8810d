package upstream

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"net"
	"sync/atomic"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// set is an immutable snapshot of the pool's endpoints. Update builds a new
// one and swaps it in atomically; what strategies need beyond the slice
// (weight tables, indexes, the hot entries) is computed there once, never
// per pick. Only the gates and the roster change afterwards: the health
// records keep them current.
type set struct {
	eps    []*Endpoint
	hot    []hot   // hot[i] describes eps[i]
	lds    []*load // lds[i] is eps[i]'s load
	alt    []int32 // alt[i] is the alias column's other endpoint (see hot.keep)
	byKey  map[string]int
	byName map[string]*Endpoint

	// ro lists the endpoints whose gate is not shut, by weight class.
	ro    *health.Roster
	wcls  []wclass // the roster's classes
	wt    []int32  // wt[i] is eps[i]'s weight, for classes that mix weights; nil when none does
	mass  int64    // Σ members × cap over the classes: the roster's mass with every endpoint in
	total int64    // sum of the weights: the alias columns' unit
	cells uint64   // len(eps) × total, the alias table's cells (0: overflows)

	viewState // the tag views (view.go), built on demand

	// detours holds the round-robin turns of the targets that take theirs
	// apart (see roundRobin); nil until a target first does.
	detours atomic.Pointer[rrDetours]
}

// hot is what the pick path needs of an endpoint besides its Endpoint and
// load, copied into one dense array. gate is the health record's
// admission summary, published here by the tracker (bind), so that a
// refused candidate costs only its entry instead of a miss on the large
// health record; the record (e.rec) is read only when the gate asks. keep
// makes the entry the weighted strategy's alias column too.
//
// At 100,000 endpoints (issue 8) a pick's cost is its cache misses. A
// candidate's entry, eps[i] and lds[i] are all found from i, so they are
// fetched in parallel, and the arrays (8 or 16 bytes an endpoint) mostly
// stay in cache; the Endpoint and the load follow, in parallel too. The
// Endpoint is the one miss every pick pays (the release reads it), so
// nothing else may stand in front of it.
//
// An entry is 16 bytes, four to a cache line, none straddling two.
type hot struct {
	gate     health.Gate
	maxConns int32 // MaxConns, at most math.MaxInt32
	keep     int64 // alias column: this endpoint's share, in units of set.total; alt[i] has the rest
}

// newSet builds the snapshot of eps. Its gates ask the tracker, and its
// roster holds every endpoint, until bind.
func newSet(eps []*Endpoint) *set {
	s := &set{eps: eps, hot: make([]hot, len(eps)), lds: make([]*load, len(eps)), alt: make([]int32, len(eps)),
		byKey: make(map[string]int, len(eps)), byName: make(map[string]*Endpoint, len(eps))}
	for i, e := range eps {
		s.hot[i].maxConns = int32(min(e.MaxConns, math.MaxInt32))
		s.lds[i] = e.ld
		s.byKey[e.Key] = i
		s.byName[e.Name] = e
	}
	class, wcls, wt := weightClasses(eps)
	s.ro, s.wcls, s.wt = health.NewRoster(class), wcls, wt
	for k, c := range wcls {
		s.mass += int64(s.ro.Len(k)) * c.cap
	}
	alias, total := newAlias(eps)
	for i, c := range alias {
		s.hot[i].keep, s.alt[i] = c.keep, int32(c.other)
	}
	s.total = total
	if hi, lo := bits.Mul64(uint64(len(eps)), uint64(total)); hi == 0 {
		s.cells = lo
	}
	return s
}

// bind makes every record of s publish its admission state to s's gates
// and roster (the previous snapshot's gates fall back to asking tr). Call
// it before s is stored, so that picks from s start with published gates.
func (s *set) bind(tr *health.Tracker) {
	for i, e := range s.eps {
		if e.rec != nil {
			tr.Bind(e.rec, &s.hot[i].gate, s.ro, i)
		}
	}
}

// admitter is the per-request filter a strategy consults: eligibility,
// slow start, per-target cooldowns, tags, provider limits and the
// endpoints this request already tried. admit either refuses with no side
// effect or accepts and reserves the endpoint (one active tunnel, one rate
// token, one slow-start slot), so a strategy may call it on any number of
// candidates but must return the first that it accepts. viable is admit
// without reserving anything and without the checks that would need to
// (rate tokens, slow-start slots): false only where admit would refuse,
// for the exact fallback (scan). tagSet returns the request's tags and
// their key (sorted, without duplicates; "" for none), which name its
// view and its round-robin cursor.
//
// It is an interface, not a func value, so that a pick allocates nothing:
// *Attempts implements it.
//
// coolingForTarget reports, after admit refused i, that i was refused for
// the request's target only: it is eligible, and cooling for that host
// (or host:port). target is the request's host:port, as health files it.
type admitter interface {
	admit(s *set, i int) bool
	viable(s *set, i int) bool
	tagSet() (tags []string, key string)
	target() string
	coolingForTarget(s *set, i int) bool
}

// strategy is one selection policy over a snapshot (STYLE rule 9: filter
// by admit, pick). pick returns nil when no endpoint is admitted. A
// request with tags picks within its view (view.go), the endpoints that
// carry them. Every strategy inspects O(1) endpoints per pick while most
// are admitted; it degrades to a scan or walk of the set (or view) only
// when nearly all are out, which is when finding the last good one matters
// more than speed.
//
// The strategies live one family to a file: select_rr.go (round-robin),
// select_draw.go (random and weighted, and the draws they share),
// select_leastconn.go (least-conn) and latency.go (lowest-latency).
type strategy interface {
	pick(s *set, a admitter) *Endpoint
}

func newStrategy(name string) (strategy, error) {
	switch name {
	case "round-robin":
		return &roundRobin{}, nil
	case "random":
		return randomPick{}, nil
	case "least-conn":
		return leastConn{}, nil
	case "weighted":
		return weighted{}, nil
	case "lowest-latency":
		return &lowestLatency{}, nil
	}
	return nil, fmt.Errorf("unknown strategy %q (round-robin, random, least-conn, weighted, lowest-latency)", name)
}

// walk returns the first endpoint admitted going round list (nil: the
// whole set) from position start. It is the last resort of every
// strategy.
func walk(s *set, list []int32, start int, a admitter) *Endpoint {
	n := len(s.hot)
	if list != nil {
		n = len(list)
	}
	for k := 0; k < n; k++ {
		j := start + k
		if j >= n {
			j -= n
		}
		if list != nil {
			j = int(list[j])
		}
		if a.admit(s, j) {
			return s.eps[j]
		}
	}
	return nil
}

// probeDialer is what the health tracker probes an endpoint through (the
// pool hands it to health.Tracker.Add): the endpoint's own dialer, so a
// probe makes the same handshake and auth as traffic, plus the set-up time
// of each passing probe folded into the endpoint's smoothed latency
// (health.SetupObserver), the figure lowest-latency picks by. Bug: only
// tunnels fed it, so before any traffic lowest-latency knew nothing of
// upstreams that probes had just timed, and its first picks were blind.
// The probe's own dial does not feed it, so a probe that failed after its
// set-up (a wrong status) counts for nothing. Stored in an interface it
// does not allocate (one pointer).
type probeDialer struct{ e *Endpoint }

func (d probeDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return d.e.dialer.DialContext(ctx, network, addr)
}

// DialForward is the endpoint dialer's, for an http:// probe URL through an
// HTTP proxy; ok is false for other dialers (the probe then tunnels).
func (d probeDialer) DialForward(ctx context.Context) (net.Conn, string, bool, error) {
	fd, ok := d.e.dialer.(forwardDialer)
	if !ok {
		return nil, "", false, nil
	}
	return fd.DialForward(ctx)
}

// ObserveSetup feeds a passing probe's set-up time to e's smoothed latency.
func (d probeDialer) ObserveSetup(setup time.Duration) { d.e.observeLatency(setup) }
