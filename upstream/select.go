package upstream

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

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

// Draws. A strategy draws among the endpoints whose gate is not shut
// ("in"), in one of two ways, both exact: a draw that lands on a shut gate
// is drawn again, which leaves the distribution over the others as it
// was, so any sequence of them is exact too.
//
//   - direct, while at least half of the set is in (half of the weight,
//     for weighted): from the whole set, uniformly or by the alias table
//     (hot.keep, alt). That is one dependent memory access fewer than the
//     roster, and at most one draw in two (in expectation) lands on a shut
//     gate. A pick makes its first directDraws draws so.
//   - from the roster, which lists only those in: with 9 in 10 endpoints
//     cooling, a direct draw would miss 9 times in 10, and each miss costs
//     a cache miss at 100,000 endpoints (issue 8).

// Results of a draw besides an index.
const (
	drawEmpty    = -1 // nothing is in
	drawRejected = -2 // the roster draw failed its acceptance test, or raced a change: draw again
)

// rosterDraw draws uniformly from the roster, which holds in endpoints,
// or returns drawEmpty. (randomPick draws directly itself.)
func (s *set) rosterDraw(in int) int {
	if in <= 0 {
		return drawEmpty
	}
	return s.member(rand.IntN(in))
}

// uniform2 is two independent uniform draws from one random number.
func (s *set) uniform2(direct bool) (int, int) {
	n, in := len(s.hot), s.ro.In()
	switch {
	case in <= 0:
		return drawEmpty, drawEmpty
	case direct && 2*in >= n:
		return rand2(n)
	}
	i, j := rand2(in)
	return s.member(i), s.member(j)
}

// member returns the r-th endpoint in the roster, counting class by
// class, or drawRejected if the roster shrank under the draw.
func (s *set) member(r int) int {
	for k := range s.wcls {
		c := s.ro.Len(k)
		if r < c {
			return s.ro.Member(k, r)
		}
		r -= c
	}
	return drawRejected
}

// weightedDraw draws an endpoint with probability proportional to its
// weight among those in, directly when direct allows; or returns
// drawRejected (draw again) or drawEmpty.
func (s *set) weightedDraw(direct bool) int {
	if direct && s.ro.In() == len(s.hot) {
		return s.aliasDraw()
	}
	var cnt [maxClasses]int64
	var mass int64
	for k, c := range s.wcls {
		cnt[k] = int64(s.ro.Len(k))
		mass += cnt[k] * c.cap
	}
	switch {
	case mass <= 0:
		return drawEmpty
	case direct && 2*mass >= s.mass:
		return s.aliasDraw()
	}
	return s.weightedAt(rand.Int64N(mass), &cnt)
}

// aliasDraw draws from the whole set by the alias table: a uniform column
// i and a uniform r in [0, total), which one random number in
// [0, n×total) gives as its quotient and remainder by total (a second
// random number costs more than the division). A column's own endpoint is
// usually kept, so the CPU fetches its Endpoint and load before the
// comparison settles.
func (s *set) aliasDraw() int {
	var i int
	var r int64
	if s.cells > 0 {
		x := rand.Uint64N(s.cells)
		i, r = int(x/uint64(s.total)), int64(x%uint64(s.total))
	} else {
		i, r = rand.IntN(len(s.hot)), rand.Int64N(s.total)
	}
	if r >= s.hot[i].keep {
		i = int(s.alt[i])
	}
	return i
}

// weightedAt draws from the roster for the random number r in
// [0, Σ cnt[k]×cap): a class with probability proportional to its members
// in times its cap, a member of it uniformly, kept with probability
// weight/cap (always, in a class of one weight). r's offset in its class's
// range divided by cap picks the member, and the remainder, uniform in
// [0, cap) and independent of it, is the acceptance test.
func (s *set) weightedAt(r int64, cnt *[maxClasses]int64) int {
	for k, c := range s.wcls {
		if m := cnt[k] * c.cap; r >= m {
			r -= m
			continue
		}
		i := s.ro.Member(k, int(r/c.cap))
		if c.mixed && r%c.cap >= int64(s.wt[i]) {
			return drawRejected
		}
		return i
	}
	return drawEmpty // unreachable while r is in range
}

// rand2 returns two independent uniform ints in [0, n), 0 < n < 2^32, from
// the two halves of one 64-bit random number (Lemire's multiply-shift; a
// half in the biased zone, probability below n/2^32, draws again).
func rand2(n int) (int, int) {
	m := uint64(n)
	for {
		x := rand.Uint64()
		a, b := (x&math.MaxUint32)*m, (x>>32)*m
		if uint32(a) < uint32(n) || uint32(b) < uint32(n) {
			if t := -uint32(n) % uint32(n); uint32(a) < t || uint32(b) < t {
				continue
			}
		}
		return int(a >> 32), int(b >> 32)
	}
}

// maxWeight bounds a weight so that the alias table's integer arithmetic
// (weight × pool size) cannot overflow, nor a class's mass (members ×
// cap).
const maxWeight = 1_000_000

func weight(e *Endpoint) int64 { return int64(min(max(e.Weight, 1), maxWeight)) }

// alias is one column of an alias table: a uniform column i, then a draw
// r in [0, total), gives i when r < keep and other otherwise.
type alias struct {
	keep  int64
	other int
}

// newAlias builds the alias table of the endpoints' weights (Vose's
// method, in exact integer arithmetic: column i holds weight*n in units
// of total), so the weighted strategy draws in O(1), one table read, at
// any pool size.
func newAlias(eps []*Endpoint) ([]alias, int64) {
	n := int64(len(eps))
	var total int64
	for _, e := range eps {
		total += weight(e)
	}
	t := make([]alias, n)
	p := make([]int64, n) // scaled weights: column mass is total
	var small, large []int
	for i, e := range eps {
		p[i] = weight(e) * n
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

// Roster weight classes. A set with at most maxExactClasses distinct
// weights (the usual case) gets one class per weight; a set with more
// groups them by power of two (weight in [2^k, 2^(k+1))), at most 20
// classes under maxWeight, and a roster draw in such a class is kept with
// probability weight/cap, more than 1/2.
const (
	maxExactClasses = 16
	maxClasses      = 20
)

// wclass is one weight class.
type wclass struct {
	cap   int64 // the largest weight in the class
	mixed bool  // the class holds several weights: a draw is kept with probability weight/cap
}

// weightClasses returns each endpoint's weight class, the classes, and
// the weights when some class mixes them (else nil).
func weightClasses(eps []*Endpoint) (class []uint8, cls []wclass, wt []int32) {
	class = make([]uint8, len(eps))
	var ws []int64 // distinct weights, while there are at most maxExactClasses
	for _, e := range eps {
		if w := weight(e); !slices.Contains(ws, w) {
			if ws = append(ws, w); len(ws) > maxExactClasses {
				break
			}
		}
	}
	if len(ws) <= maxExactClasses {
		slices.Sort(ws)
		cls = make([]wclass, len(ws))
		for k, w := range ws {
			cls[k].cap = w
		}
		for i, e := range eps {
			k, _ := slices.BinarySearch(ws, weight(e))
			class[i] = uint8(k)
		}
		return class, cls, nil
	}
	var lo, hi [maxClasses]int64 // per power of two: smallest and largest weight
	wt = make([]int32, len(eps))
	for i, e := range eps {
		w := weight(e)
		g := bits.Len64(uint64(w)) - 1
		if hi[g] == 0 || w < lo[g] {
			lo[g] = w
		}
		hi[g] = max(hi[g], w)
		class[i], wt[i] = uint8(g), int32(w)
	}
	var dense [maxClasses]uint8 // power of two -> class, skipping empty ones
	for g := range hi {
		if hi[g] > 0 {
			dense[g] = uint8(len(cls))
			cls = append(cls, wclass{cap: hi[g], mixed: lo[g] != hi[g]})
		}
	}
	for i := range class {
		class[i] = dense[class[i]]
	}
	return class, cls, wt
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
	admit(s *set, i int) bool
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
	return nil, fmt.Errorf("unknown strategy %q (round-robin, random, least-conn, weighted, lowest-latency)", name)
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
		if a.admit(s, j) {
			return s.eps[j]
		}
	}
	return nil
}

// randomDraws is how many draws that admit refuses random, weighted and
// least-conn make before walking the set from a random point; maxDraws
// bounds the draws that land on a shut gate or fail the roster's
// acceptance test, and the first directDraws may be direct (see Draws).
// Independent draws keep the distribution exact; a walk hands a refused
// endpoint's share to its neighbour, so it is the last resort, for
// requests that most endpoints refuse (tags, limits, endpoints tried).
const (
	randomDraws = 4
	maxDraws    = 24
	directDraws = 8
)

// roundRobin takes endpoints in turn from an atomic cursor: one atomic
// add and one admit per pick while the endpoint under the cursor is
// admitted. The cursor counts over the endpoints in (the roster) when
// some are out, and moves on by itself past a refused one (tags, limits),
// so every endpoint admitted gets the same share: walking on from a
// refused one, as the fallback does, would hand the share of a run of
// cooling endpoints to the one after it (2 of 5 in: 40/10 instead of
// 25/25).
//
// Requests with tags turn their own cursor, one per tag set: on one shared
// cursor, clients asking for different tags alternately used up each
// other's steps and locked into a fixed pattern (tag a always got the same
// upstream of three). At most maxTagCursors tag sets get one (tags come
// from clients); further ones share the untagged cursor.
type roundRobin struct {
	cursor  atomic.Uint64
	byTags  sync.Map // tag key → *atomic.Uint64
	tagSets atomic.Int64
}

// maxTagCursors bounds the round-robin cursors kept for tag sets.
const maxTagCursors = 4096

// tagKeyer is an admitter that names its request's tag set ("" for none).
type tagKeyer interface{ tagKey() string }

// cursorFor returns the cursor for a's tag set.
func (r *roundRobin) cursorFor(a admitter) *atomic.Uint64 {
	tk, ok := a.(tagKeyer)
	if !ok {
		return &r.cursor
	}
	key := tk.tagKey()
	if key == "" {
		return &r.cursor
	}
	if c, ok := r.byTags.Load(key); ok {
		return c.(*atomic.Uint64)
	}
	if r.tagSets.Load() >= maxTagCursors {
		return &r.cursor
	}
	c, loaded := r.byTags.LoadOrStore(key, new(atomic.Uint64))
	if !loaded {
		r.tagSets.Add(1)
	}
	return c.(*atomic.Uint64)
}

func (r *roundRobin) pick(s *set, a admitter) *Endpoint {
	n := len(s.eps)
	if n == 0 {
		return nil
	}
	cursor := r.cursorFor(a)
	for range randomDraws {
		c := cursor.Add(1) - 1
		i := 0
		switch in := s.ro.In(); {
		case in >= n: // all in: the set's own order
			i = int(c % uint64(n))
		case in <= 0:
			return walk(s, int(c%uint64(n)), a)
		default:
			if i = s.member(int(c % uint64(in))); i < 0 {
				continue // the roster changed under the draw
			}
		}
		if a.admit(s, i) {
			return s.eps[i]
		}
	}
	return walk(s, int(cursor.Load()%uint64(n)), a)
}

// randomPick draws uniformly among the endpoints in (math/rand/v2's
// per-thread generator, no lock), then walks.
type randomPick struct{}

func (randomPick) pick(s *set, a admitter) *Endpoint {
	return drawPick(s, a, func(draws int) int {
		n, in := len(s.eps), s.ro.In()
		if in == n || draws < directDraws && 2*in >= n {
			return rand.IntN(n) // all in (the roster would be a permutation), or direct
		}
		return s.rosterDraw(in)
	})
}

// weighted draws with probability proportional to Weight among the
// endpoints in, then walks; like randomPick.
type weighted struct{}

func (weighted) pick(s *set, a admitter) *Endpoint {
	return drawPick(s, a, func(draws int) int { return s.weightedDraw(draws < directDraws) })
}

// drawPick admits the first of up to maxDraws draws (draw is given the
// number of draws so far) that is not shut and admits, giving up after
// randomDraws refusals or when draw finds nothing in (drawEmpty); then it
// walks from a random place.
func drawPick(s *set, a admitter, draw func(draws int) int) *Endpoint {
	n := len(s.eps)
	if n == 0 {
		return nil
	}
	for draws, refused := 0, 0; draws < maxDraws && refused < randomDraws; draws++ {
		i := draw(draws)
		if i == drawEmpty {
			break
		}
		if i == drawRejected || s.hot[i].gate.Shut() {
			continue
		}
		if a.admit(s, i) {
			return s.eps[i]
		}
		refused++
	}
	return walk(s, rand.IntN(n), a)
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
// random among the endpoints in (power of two choices): O(1) per pick at
// any pool size, and the most loaded endpoints are avoided almost surely;
// exact least-connections for pools up to fullScan. Candidates are ranked
// without reserving anything, then admitted best first; when both are
// refused it falls back to randomPick (draws, then a walk), so a pool with
// few admitted endpoints still finds one.
type leastConn struct{}

func (leastConn) pick(s *set, a admitter) *Endpoint {
	if len(s.eps) > fullScan {
		return leastConnSampled(s, a)
	}
	if len(s.eps) == 0 {
		return nil
	}
	// Exact least-connections among the endpoints in, the set scanned
	// from a random offset so that ties do not always favour the first.
	var buf [fullScan]int
	c := sample(s, &buf, leastConnSample)
	if s.ro.In() < len(s.eps) { // leave out the shut ones (admit would refuse them)
		k := 0
		for _, x := range c {
			if !s.hot[x].gate.Shut() {
				c[k] = x
				k++
			}
		}
		c = c[:k]
	}
	for len(c) > 0 {
		bi, best := 0, s.lds[c[0]].active.Load()
		for i := 1; i < len(c); i++ {
			if n := s.lds[c[i]].active.Load(); n < best {
				bi, best = i, n
			}
		}
		if a.admit(s, c[bi]) {
			return s.eps[c[bi]]
		}
		c[bi] = c[len(c)-1]
		c = c[:len(c)-1]
	}
	return nil // every endpoint was ranked and refused
}

// leastConnSampled is leastConn for a pool larger than fullScan.
func leastConnSampled(s *set, a admitter) *Endpoint {
	var c [2]int
	k := 0
	for draws := 0; k < 2 && draws < maxDraws; draws += 2 {
		i, j := s.uniform2(draws < directDraws)
		if i == drawEmpty {
			break
		}
		for _, x := range [2]int{i, j} {
			if k < 2 && x >= 0 && !s.hot[x].gate.Shut() {
				c[k] = x
				k++
			}
		}
	}
	if k == 2 {
		// The first candidate's MaxConns is read from its Endpoint: that
		// fetches the Endpoint, which admit and the release read, during
		// the ranking rather than after it, and the first candidate is
		// the one taken on a tie (both idle, as while tunnels are short).
		if connRank(s.lds[c[1]], int64(s.hot[c[1]].maxConns)) < connRank(s.lds[c[0]], int64(s.eps[c[0]].MaxConns)) {
			c[0], c[1] = c[1], c[0]
		}
		if a.admit(s, c[0]) {
			return s.eps[c[0]]
		}
		if c[1] != c[0] && a.admit(s, c[1]) {
			return s.eps[c[1]]
		}
	}
	return randomPick{}.pick(s, a)
}

// connRank is a least-conn candidate's rank: its open tunnels, or more
// than any when it has reached maxConns (admit would refuse it anyway).
func connRank(ld *load, maxConns int64) int64 {
	n := ld.active.Load()
	if maxConns > 0 && n >= maxConns {
		return math.MaxInt64
	}
	return n
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
	if unknown >= 0 && (explore || best < 0 && cur < 0) && a.admit(s, unknown) {
		return s.eps[unknown]
	}
	if cur >= 0 && (best < 0 || best == cur ||
		bestLat*latencySwitchDiv >= s.lds[cur].lat.Load()*latencySwitch) && a.admit(s, cur) {
		return s.eps[cur]
	}
	if best >= 0 && a.admit(s, best) {
		if best != cur {
			l.cur.Store(&latencyChoice{s: s, i: best})
		}
		return s.eps[best]
	}
	// Neither the choice nor the best sampled is admitted: any sampled
	// endpoint, fastest known first, then anything.
	slices.SortFunc(c, func(x, y int) int {
		lx, ly := s.lds[x].lat.Load(), s.lds[y].lat.Load()
		if lx == 0 {
			lx = 1 << 62
		}
		if ly == 0 {
			ly = 1 << 62
		}
		return cmp.Compare(lx, ly)
	})
	for _, i := range c {
		if i != best && i != cur && a.admit(s, i) {
			return s.eps[i]
		}
	}
	if len(s.eps) <= fullScan {
		return nil
	}
	return randomPick{}.pick(s, a)
}
