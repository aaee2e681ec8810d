package upstream

import (
	"math"
	"math/rand/v2"
	"slices"
)

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
