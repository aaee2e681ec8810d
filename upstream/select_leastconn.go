package upstream

import (
	"math"
	"math/rand/v2"
)

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
		// One random number per ranking, not one per tie: with every
		// endpoint idle all of them tie, and a draw each made an exact
		// pick of ten cost over 200 ns.
		var act [fullScan]int64
		best, ties := int64(math.MaxInt64), 0
		for i, x := range c {
			switch act[i] = s.lds[x].active.Load(); {
			case act[i] < best:
				best, ties = act[i], 1
			case act[i] == best:
				ties++
			}
		}
		bi := 0
		for r := rand.IntN(ties); ; bi++ {
			if act[bi] == best {
				if r == 0 {
					break
				}
				r--
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
