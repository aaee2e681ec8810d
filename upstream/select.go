package upstream

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"math/bits"
	"math/rand/v2"
	"net"
	"slices"
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

// randomDraws is how many draws that admit refuses random, weighted and
// least-conn make before the fallback: an exact scan of a list of at most
// scanMax, else a walk from a random point (see scan); maxDraws bounds the
// draws that land on a shut gate or fail the roster's acceptance test, and
// the first directDraws may be direct (see Draws). Independent draws keep
// the distribution exact, and so does the scan; a walk hands a refused
// endpoint's share to its neighbour, so it is the last resort, for
// requests that most endpoints of a large pool refuse (limits, endpoints
// tried, host bans). Tags refuse nothing: their requests draw within
// their view.
const (
	randomDraws = 8
	maxDraws    = 24
	directDraws = 8
)

// roundRobin takes endpoints in turn from an atomic cursor: one atomic
// add and one admit per pick while the endpoint under the cursor is
// admitted. The cursor counts over the endpoints in (the roster) when
// some are out, and steps on past a refused one (limits, endpoints tried),
// one cursor value per endpoint looked at, so every endpoint admitted gets
// the same share: looking on from a refused one without taking the cursor
// values, as the walk does, would hand the share of a run of refused
// endpoints to the one after it (2 of 5 in: 40/10 instead of 25/25).
//
// Requests with tags count over their view (its endpoints that are not
// shut, stepped past like refused ones), on their own cursor, one per tag
// set: on one shared cursor, clients asking for different tags alternately
// used up each other's steps and locked into a fixed pattern (tag a always
// got the same upstream of three). The cursor is the view's (view.rr), so
// it is kept exactly as long as the view: a tag set no upstream carries
// gets none, and a reload starts afresh. A tag set whose view the set does
// not keep (past maxTagViews) shares the untagged cursor. Issue: the
// cursors were the strategy's, one for every tag set asked for, the first
// 4096 for good, typos included (scraper-tag-bogus1, bogus2, …), so after
// a typo loop every tag set added later shared the untagged cursor, and
// two of them alternating each got one upstream of two.
//
// A target that an upstream is cooling for (a per-host ban, a refusal of
// one port, a host:port others reach) takes its turns apart too, from a
// cursor of its own (a detour, see rrDetours), from the first pick of it
// that meets such an upstream on. On the shared cursor, its picks stepped
// past that upstream taking another target's turn each time, so a client
// alternating two hosts locked into a fixed pattern: with e0 cooling for
// host a only, host b got e2 every time of three upstreams, and 2 of 4 or
// of 5 (host a likewise). Targets no upstream cools for keep the shared
// turn, one pool-wide order; the detour costs a hash of the target per
// pick once the set has one, and nothing before.
type roundRobin struct {
	cursor atomic.Uint64
}

func (r *roundRobin) pick(s *set, a admitter) *Endpoint {
	n := len(s.eps)
	if n == 0 {
		return nil
	}
	cursor := &r.cursor
	var list []int32
	if v := s.viewOf(a); v != nil {
		if len(v.idx) == 0 {
			return nil // no endpoint has the tags
		}
		if v.kept {
			cursor = &v.rr
		}
		list = v.restricted()
	}
	detoured := false
	if d := s.detours.Load(); d != nil {
		if c := d.cursorOf(a); c != nil {
			cursor, detoured = c, true
		}
	}
	if list != nil {
		return rrList(s, list, cursor, detoured, a)
	}
	// Steps: at most one per endpoint in, so that a pick every endpoint
	// refuses ends; then a walk, for the gates that ask (an old snapshot)
	// and for values other picks took meanwhile.
	for k := 0; ; k++ {
		in := s.ro.In()
		if in <= 0 || k >= in {
			break
		}
		c := cursor.Add(1) - 1
		i := 0
		switch {
		case in >= n: // all in: the set's own order
			i = int(c % uint64(n))
		default:
			if i = s.member(int(c % uint64(in))); i < 0 {
				continue // the roster changed under the draw
			}
		}
		if a.admit(s, i) {
			return s.eps[i]
		}
		if !detoured && a.coolingForTarget(s, i) {
			cursor, detoured = s.detour(a), true
		}
	}
	return walk(s, nil, int(cursor.Load()%uint64(n)), a)
}

// rrList is round-robin over a view's members list: shut ones and refused
// ones are stepped past, each taking its cursor value, so the others get
// equal shares. A target cooling on a member takes its turns apart from
// then on, as in roundRobin.pick.
func rrList(s *set, list []int32, cursor *atomic.Uint64, detoured bool, a admitter) *Endpoint {
	m := uint64(len(list))
	if m == 0 {
		return nil
	}
	for range m {
		i := int(list[(cursor.Add(1)-1)%m])
		if s.hot[i].gate.Shut() {
			continue
		}
		if a.admit(s, i) {
			return s.eps[i]
		}
		if !detoured && a.coolingForTarget(s, i) {
			cursor, detoured = s.detour(a), true
		}
	}
	return walk(s, list, int(cursor.Load()%m), a)
}

// rrDetours are the round-robin turns of the targets that take theirs
// apart from the shared cursor (see roundRobin): a fixed table of cursors,
// one per slot, a target's slot a hash of it and of its request's tag set
// (whose view the cursor counts over), and a bit per slot saying that its
// targets detour. Bounded whatever clients ask for, and lock-free: a pick
// reads a bit and adds to a cursor. Two targets in one slot (1 pair in
// rrSlots) share its cursor, as every target shared the one cursor
// before. A slot detours for the rest of the set's life (a reload starts
// afresh): a target that is no longer cooled anywhere keeps its own turn,
// which is as even as the shared one.
type rrDetours struct {
	seed   maphash.Seed
	marked [rrSlots / 64]atomic.Uint64
	cursor [rrSlots]atomic.Uint64
}

// rrSlots is the number of detour cursors a set may hold (8 KiB).
const rrSlots = 1024

// slot returns a's slot.
func (d *rrDetours) slot(a admitter) uint64 {
	h := maphash.String(d.seed, a.target())
	if _, key := a.tagSet(); key != "" {
		h ^= bits.RotateLeft64(maphash.String(d.seed, key), 31)
	}
	return h % rrSlots
}

// cursorOf returns the cursor of a's slot when it detours, else nil.
func (d *rrDetours) cursorOf(a admitter) *atomic.Uint64 {
	k := d.slot(a)
	if d.marked[k/64].Load()&(1<<(k%64)) == 0 {
		return nil
	}
	return &d.cursor[k]
}

// detour makes a's slot detour (creating the set's table at its first
// detour) and returns its cursor. A slot's first detour starts its cursor
// at a random place, so that targets detouring together do not all start
// at the same endpoint.
func (s *set) detour(a admitter) *atomic.Uint64 {
	d := s.detours.Load()
	if d == nil {
		d = &rrDetours{seed: maphash.MakeSeed()}
		if !s.detours.CompareAndSwap(nil, d) {
			d = s.detours.Load()
		}
	}
	k := d.slot(a)
	if bit := uint64(1) << (k % 64); d.marked[k/64].Or(bit)&bit == 0 {
		d.cursor[k].Store(rand.Uint64())
	}
	return &d.cursor[k]
}

// target is the request's host:port as health files it (see Attempts.key).
func (a *Attempts) target() string { return a.key }

// coolingForTarget reports whether i, which admit refused, is eligible
// and cooling for a's target only (see admitter).
func (a *Attempts) coolingForTarget(s *set, i int) bool {
	e := s.eps[i]
	return a.key != "" && e.rec != nil && !s.hot[i].gate.Shut() && a.p.tr.Eligible(e.rec) && a.p.tr.TargetCooling(e.rec, a.key)
}

// randomPick draws uniformly among the endpoints in (math/rand/v2's
// per-thread generator, no lock), or among a view's members.
type randomPick struct{}

func (randomPick) pick(s *set, a admitter) *Endpoint {
	if list := s.viewOf(a).restricted(); list != nil {
		return drawPick(s, a, list, false, func(int) int { return int(list[rand.IntN(len(list))]) })
	}
	return drawPick(s, a, nil, false, func(draws int) int {
		n, in := len(s.eps), s.ro.In()
		if in == n || draws < directDraws && 2*in >= n {
			return rand.IntN(n) // all in (the roster would be a permutation), or direct
		}
		return s.rosterDraw(in)
	})
}

// weighted draws with probability proportional to Weight among the
// endpoints in, or among a view's members (its own alias table); like
// randomPick.
type weighted struct{}

func (weighted) pick(s *set, a admitter) *Endpoint {
	if v := s.viewOf(a); v.restricted() != nil {
		return drawPick(s, a, v.idx, true, func(int) int { return v.weightedDraw(s) })
	}
	return drawPick(s, a, nil, true, func(draws int) int { return s.weightedDraw(draws < directDraws) })
}

// drawPick admits the first of up to maxDraws draws (draw is given the
// number of draws so far) that is not shut and admits, giving up after
// randomDraws refusals or when draw finds nothing in (drawEmpty); then it
// falls back on list (nil: the whole set), by weight when byWeight: an
// exact scan when it is short, else a walk from a random place.
func drawPick(s *set, a admitter, list []int32, byWeight bool, draw func(draws int) int) *Endpoint {
	n := len(s.eps)
	if list != nil {
		n = len(list)
	}
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
	if n <= scanMax {
		return scan(s, list, a, byWeight)
	}
	return walk(s, list, rand.IntN(n), a)
}

// Exact fallback. When draws keep being refused (most candidates are at
// their max_conns, tried, banned for the host), a walk from a random point
// hands every refused endpoint's share to the next admitted one: of e0
// and e9 free among ten, e9 got two picks in three. A list of at most
// scanMax candidates is scanned instead: one of those that a finds viable
// (see admitter) is drawn uniformly or by weight, in one pass (weighted
// reservoir sampling), and admitted; one that admit still refuses (a rate
// token, a slow-start slot) is left out of the next of scanRounds passes.
// The first endpoint admitted so is drawn exactly among those admitted.
// Longer lists walk, as before: a scan of a large pool per pick costs
// more than the fairness it buys when nearly all of it refuses.
const (
	scanMax    = 1024
	scanRounds = 4
)

// scan is the exact fallback over list (nil: the whole set), by weight
// when byWeight; it returns nil when nothing is viable.
func scan(s *set, list []int32, a admitter, byWeight bool) *Endpoint {
	n := len(s.eps)
	if list != nil {
		n = len(list)
	}
	var out [scanRounds]int
	for round := range scanRounds {
		best, sum := -1, int64(0)
		for j := range n {
			i := j
			if list != nil {
				i = int(list[j])
			}
			if s.hot[i].gate.Shut() || slices.Contains(out[:round], i) || !a.viable(s, i) {
				continue
			}
			w := int64(1)
			if byWeight {
				w = weight(s.eps[i])
			}
			if sum += w; rand.Int64N(sum) < w {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		if a.admit(s, best) {
			return s.eps[best]
		}
		out[round] = best
	}
	return walk(s, list, rand.IntN(n), a)
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

// sample fills buf with the indices of the candidates to compare, taken
// from list (nil: the whole set): all of it rotated by a random offset (so
// ties do not always favour the first endpoint) when it is small, else k
// uniform draws (k ≤ fullScan; duplicates are harmless).
func sample(s *set, list []int32, buf *[fullScan]int, k int) []int {
	n := len(s.eps)
	if list != nil {
		n = len(list)
	}
	c := buf[:k]
	if n <= fullScan {
		c = buf[:n]
		off := rand.IntN(n)
		for i := range c {
			c[i] = (off + i) % n
		}
	} else {
		for i := range c {
			c[i] = rand.IntN(n)
		}
	}
	if list != nil {
		for i, x := range c {
			c[i] = int(list[x])
		}
	}
	return c
}

// leastConn takes the candidate with fewer open tunnels of two drawn at
// random among the endpoints in (power of two choices): O(1) per pick at
// any pool size, and the most loaded endpoints are avoided almost surely;
// exact least-connections for pools up to fullScan. A request with tags
// ranks its view's members the same way. Candidates are ranked
// without reserving anything, then admitted best first; when both are
// refused it falls back to randomPick (draws, then a walk), so a pool with
// few admitted endpoints still finds one.
type leastConn struct{}

func (leastConn) pick(s *set, a admitter) *Endpoint {
	list := s.viewOf(a).restricted()
	n := len(s.eps)
	if list != nil {
		n = len(list)
	}
	if n > fullScan {
		return leastConnSampled(s, list, a)
	}
	if n == 0 {
		return nil
	}
	// Exact least-connections among the endpoints in, the set (or view)
	// scanned from a random offset so that ties do not always favour the
	// first.
	var buf [fullScan]int
	c := sample(s, list, &buf, leastConnSample)
	if list != nil || s.ro.In() < len(s.eps) { // leave out the shut ones (admit would refuse them)
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
		// Ties (the normal case while tunnels are short) are broken
		// uniformly: taking the first tie after the random offset gave a
		// shut endpoint's turns to its neighbour in list order (one
		// disabled upstream doubled the next one's share).
		bi, best, ties := 0, s.lds[c[0]].active.Load(), 1
		for i := 1; i < len(c); i++ {
			switch n := s.lds[c[i]].active.Load(); {
			case n < best:
				bi, best, ties = i, n, 1
			case n == best:
				ties++
				if rand.IntN(ties) == 0 {
					bi = i
				}
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

// leastConnSampled is leastConn for a pool (or list, nil: the whole set)
// larger than fullScan.
func leastConnSampled(s *set, list []int32, a admitter) *Endpoint {
	var c [2]int
	k := 0
	for draws := 0; k < 2 && draws < maxDraws; draws += 2 {
		var i, j int
		if list != nil {
			i, j = int(list[rand.IntN(len(list))]), int(list[rand.IntN(len(list))])
		} else {
			i, j = s.uniform2(draws < directDraws)
		}
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
