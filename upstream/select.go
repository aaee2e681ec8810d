package upstream

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/rotor-proxy/rotor/health"
)

// set is an immutable snapshot of the pool's endpoints. Update builds a new
// one and swaps it in atomically; what strategies need beyond the slice
// (cumulative weights, indexes, the hot entries) is computed there once,
// never per pick.
type set struct {
	eps    []*Endpoint
	hot    []hot   // hot[i] describes eps[i]
	lds    []*load // lds[i] is eps[i]'s load: lowest-latency ranks its sample from this denser array
	alias  []alias // Walker/Vose alias table of the weights
	total  int64   // sum of the weights
	byKey  map[string]int
	byName map[string]*Endpoint
}

// hot is what the pick path needs of an endpoint, copied into one dense
// array. gate is the health record's admission summary, published here by
// the tracker (bind): at 100,000 endpoints an admitted candidate then
// costs one cache miss for the entry and one for its load (the Endpoint,
// returned, is read by whoever dials it), and a refused one only the
// entry, instead of a miss on the large health record per candidate.
//
// An entry is 32 bytes, two to a cache line, none straddling two.
type hot struct {
	gate     health.Gate
	maxConns int32 // MaxConns, at most math.MaxInt32
	e        *Endpoint
	rec      *health.Record
	ld       *load
}

// newSet builds the snapshot of eps. Its gates ask the tracker until bind.
func newSet(eps []*Endpoint) *set {
	s := &set{eps: eps, hot: make([]hot, len(eps)), lds: make([]*load, len(eps)),
		byKey: make(map[string]int, len(eps)), byName: make(map[string]*Endpoint, len(eps))}
	for i, e := range eps {
		h := &s.hot[i]
		h.e, h.rec, h.ld, h.maxConns = e, e.rec, e.ld, int32(min(e.MaxConns, math.MaxInt32))
		s.lds[i] = e.ld
		s.byKey[e.Key] = i
		s.byName[e.Name] = e
	}
	s.alias, s.total = newAlias(eps)
	return s
}

// bind makes every record of s publish its admission state to s's gates
// (the previous snapshot's gates fall back to asking tr). Call it before
// s is stored, so that picks from s start with published gates.
func (s *set) bind(tr *health.Tracker) {
	for i := range s.hot {
		if h := &s.hot[i]; h.rec != nil {
			tr.Bind(h.rec, &h.gate)
		}
	}
}

// maxWeight bounds a weight so the alias table's integer arithmetic
// (weight × pool size) cannot overflow.
const maxWeight = 1_000_000

// alias is one column of an alias table: a uniform column i, then a draw
// r in [0, total), gives i when r < keep and other otherwise.
type alias struct {
	keep  int64
	other int
}

// newAlias builds the alias table of the endpoints' weights (Vose's
// method, in exact integer arithmetic: column i holds weight*n in units
// of total), so the weighted strategy draws in O(1) with two random
// numbers and one table read, at any pool size.
func newAlias(eps []*Endpoint) ([]alias, int64) {
	n := int64(len(eps))
	w := func(e *Endpoint) int64 { return int64(min(max(e.Weight, 1), maxWeight)) }
	var total int64
	for _, e := range eps {
		total += w(e)
	}
	t := make([]alias, n)
	p := make([]int64, n) // scaled weights: column mass is total
	var small, large []int
	for i, e := range eps {
		p[i] = w(e) * n
		t[i] = alias{keep: total, other: i}
		if p[i] < total {
			small = append(small, i)
		} else {
			large = append(large, i)
		}
	}
	for len(small) > 0 && len(large) > 0 {
		l, g := small[len(small)-1], large[len(large)-1]
		small, large = small[:len(small)-1], large[:len(large)-1]
		t[l] = alias{keep: p[l], other: g}
		p[g] -= total - p[l]
		if p[g] < total {
			small = append(small, g)
		} else {
			large = append(large, g)
		}
	}
	return t, total // columns left in either list keep everything
}

// admitter is the per-request filter a strategy consults: eligibility,
// slow start, per-target cooldowns, tags, provider limits and the
// endpoints this request already tried. admit either refuses with no side
// effect or accepts and reserves the endpoint (one active tunnel, one rate
// token, one slow-start slot), so a strategy may call it on any number of
// candidates but must return the first that it accepts.
//
// It is an interface, not a func value, so that a pick allocates nothing:
// *Attempts implements it.
type admitter interface {
	admit(h *hot) bool
}

// strategy is one selection policy over a snapshot (STYLE rule 9: filter
// by admit, pick). pick returns nil when no endpoint is admitted. Every
// strategy inspects O(1) endpoints per pick while most are admitted; it
// degrades to a walk of the set only when nearly all are out, which is
// when finding the last good one matters more than speed.
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
	return nil, fmt.Errorf("pool.strategy: unknown strategy %q (round-robin, random, least-conn, weighted, lowest-latency)", name)
}

// walk returns the first endpoint admitted going round the set from
// start. It is the fallback of every strategy.
func walk(s *set, start int, a admitter) *Endpoint {
	n := len(s.hot)
	for i := 0; i < n; i++ {
		j := start + i
		if j >= n {
			j -= n
		}
		if h := &s.hot[j]; a.admit(h) {
			return h.e
		}
	}
	return nil
}

// randomDraws is how many independent draws random and weighted make
// before walking on from the last one. Independent draws keep the
// distribution exact while most endpoints are admitted; walking on from a
// refused endpoint would hand its share to its neighbour.
const randomDraws = 4

// roundRobin walks the set from an atomic cursor: one atomic add and one
// admit per pick while the endpoint under the cursor is admitted.
type roundRobin struct{ cursor atomic.Uint64 }

func (r *roundRobin) pick(s *set, a admitter) *Endpoint {
	n := uint64(len(s.eps))
	if n == 0 {
		return nil
	}
	return walk(s, int((r.cursor.Add(1)-1)%n), a)
}

// randomPick draws uniformly (math/rand/v2's per-thread generator, no
// lock), then walks on.
type randomPick struct{}

func (randomPick) pick(s *set, a admitter) *Endpoint {
	n := len(s.eps)
	if n == 0 {
		return nil
	}
	i := 0
	for range randomDraws {
		i = rand.IntN(n)
		if h := &s.hot[i]; a.admit(h) {
			return h.e
		}
	}
	return walk(s, (i+1)%n, a)
}

// weighted draws with probability proportional to Weight from the set's
// alias table: O(1) per draw.
type weighted struct{}

func (weighted) pick(s *set, a admitter) *Endpoint {
	n := len(s.eps)
	if n == 0 || s.total <= 0 {
		return nil
	}
	i := 0
	for range randomDraws {
		i = rand.IntN(n)
		if c := s.alias[i]; rand.Int64N(s.total) >= c.keep {
			i = c.other
		}
		if h := &s.hot[i]; a.admit(h) {
			return h.e
		}
	}
	return walk(s, (i+1)%n, a)
}

// sampleSize is how many candidates lowest-latency compares, and
// leastConnSample how many least-conn does (power of k choices: 2 already
// gives most of the benefit over random, 4 is closer to exact). Ranking a
// candidate costs two dependent cache misses in a large pool (its entry,
// then its load), so least-conn, which ranks on every pick, stays at the
// standard two; lowest-latency mostly keeps its current choice. Pools up
// to fullScan are compared whole, exactly.
const (
	sampleSize      = 4
	leastConnSample = 2
	fullScan        = 16
)

// sample fills buf with the indices of the candidates to compare: the
// whole set rotated by a random offset (so ties do not always favour the
// first endpoint) when it is small, else k uniform draws (k ≤ fullScan;
// duplicates are harmless).
func sample(s *set, buf *[fullScan]int, k int) []int {
	n := len(s.eps)
	if n <= fullScan {
		off := rand.IntN(n)
		for i := range n {
			buf[i] = (off + i) % n
		}
		return buf[:n]
	}
	for i := range k {
		buf[i] = rand.IntN(n)
	}
	return buf[:k]
}

// leastConn takes the candidate with fewer open tunnels of two drawn at
// random (power of two choices): O(1) per pick at any pool size, and the
// most loaded endpoints are avoided almost surely; exact least-connections
// for pools up to fullScan. Candidates are ranked without reserving
// anything, then admitted best first; when both are refused it falls back
// to randomPick (draws, then a walk), so a pool with few admitted
// endpoints still finds one.
type leastConn struct{}

func (leastConn) pick(s *set, a admitter) *Endpoint {
	if len(s.eps) == 0 {
		return nil
	}
	var buf [fullScan]int
	c := sample(s, &buf, leastConnSample)
	for len(c) > 0 {
		bi, best := 0, s.hot[c[0]].ld.active.Load()
		for i := 1; i < len(c); i++ {
			if n := s.hot[c[i]].ld.active.Load(); n < best {
				bi, best = i, n
			}
		}
		if h := &s.hot[c[bi]]; a.admit(h) {
			return h.e
		}
		c[bi] = c[len(c)-1]
		c = c[:len(c)-1]
	}
	if len(s.eps) <= fullScan {
		return nil // every endpoint was ranked and refused
	}
	return randomPick{}.pick(s, a)
}

// Lowest-latency tuning.
const (
	// latencySwitch: the current choice is kept until a candidate's
	// smoothed latency is below latencySwitch/latencySwitchDiv of its own
	// (more than 20% better), so two endpoints of similar speed do not
	// make traffic flap between them.
	latencySwitch    = 4
	latencySwitchDiv = 5
	// latencyExploreEvery: one pick in this many tries a sampled endpoint
	// whose latency is still unknown, so new and recovered endpoints get
	// measured without costing much.
	latencyExploreEvery = 16
)

// lowestLatency prefers the endpoint with the lowest smoothed dial +
// handshake latency (Endpoint.Latency, recorded by Pool.Dial). It keeps a
// current choice and compares it with a sample of sampleSize candidates per
// pick (the whole pool up to fullScan), so a pick is O(1) and a large pool
// converges to its fastest endpoints over successive picks rather than
// scanning all of them each time. Hysteresis (latencySwitch) stops flapping;
// the current choice is replaced at once when it is not admitted.
type lowestLatency struct {
	cur   atomic.Pointer[latencyChoice]
	picks atomic.Uint64
}

// latencyChoice is the current choice, an index into the set it was made
// in: a choice from an older set (before a reload) is ignored.
type latencyChoice struct {
	s *set
	i int
}

func (l *lowestLatency) pick(s *set, a admitter) *Endpoint {
	if len(s.eps) == 0 {
		return nil
	}
	cur := -1
	if c := l.cur.Load(); c != nil && c.s == s {
		cur = c.i
	}
	var buf [fullScan]int
	c := sample(s, &buf, sampleSize)
	best, unknown := -1, -1
	var bestLat int64
	for _, i := range c {
		switch lat := s.lds[i].lat.Load(); {
		case lat == 0:
			if unknown < 0 {
				unknown = i
			}
		case best < 0 || lat < bestLat:
			best, bestLat = i, lat
		}
	}
	explore := l.picks.Add(1)%latencyExploreEvery == 0
	if unknown >= 0 && (explore || best < 0 && cur < 0) && a.admit(&s.hot[unknown]) {
		return s.hot[unknown].e
	}
	if cur >= 0 && (best < 0 || best == cur ||
		bestLat*latencySwitchDiv >= s.hot[cur].ld.lat.Load()*latencySwitch) && a.admit(&s.hot[cur]) {
		return s.hot[cur].e
	}
	if best >= 0 && a.admit(&s.hot[best]) {
		if best != cur {
			l.cur.Store(&latencyChoice{s: s, i: best})
		}
		return s.hot[best].e
	}
	// Neither the choice nor the best sampled is admitted: any sampled
	// endpoint, fastest known first, then anything.
	slices.SortFunc(c, func(x, y int) int {
		lx, ly := s.hot[x].ld.lat.Load(), s.hot[y].ld.lat.Load()
		if lx == 0 {
			lx = 1 << 62
		}
		if ly == 0 {
			ly = 1 << 62
		}
		return cmp.Compare(lx, ly)
	})
	for _, i := range c {
		if i != best && i != cur && a.admit(&s.hot[i]) {
			return s.hot[i].e
		}
	}
	if len(s.eps) <= fullScan {
		return nil
	}
	return randomPick{}.pick(s, a)
}
