package upstream

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
)

// Strategy picks one endpoint from a snapshot. ok filters candidates (it
// checks eligibility, slow start, limits, tags and attempts already made)
// and may consume a slot (slow start, rate), so a strategy calls it at most
// once per endpoint it would return, and returns the first that passes.
// Pick returns nil when no candidate passes.
type Strategy interface {
	Pick(cands []*Endpoint, ok func(*Endpoint) bool) *Endpoint
}

func newStrategy(name string) (Strategy, error) {
	switch name {
	case "round-robin":
		return &roundRobin{}, nil
	case "random":
		return randomPick{}, nil
	case "least-conn":
		return leastConn{}, nil
	case "weighted":
		return &weighted{}, nil
	case "lowest-latency":
		return leastConn{}, nil // TODO(issue 9): smoothed latency; least-conn until then
	}
	return nil, fmt.Errorf("pool.strategy: unknown strategy %q (round-robin, random, least-conn, weighted, lowest-latency)", name)
}

// roundRobin walks the set from an atomic cursor. When most endpoints are
// eligible a pick inspects O(1) of them; it is O(n) only when nearly all
// are out, which is when correctness matters more than speed.
type roundRobin struct{ cursor atomic.Uint64 }

func (r *roundRobin) Pick(c []*Endpoint, ok func(*Endpoint) bool) *Endpoint {
	n := uint64(len(c))
	if n == 0 {
		return nil
	}
	start := r.cursor.Add(1) - 1
	for i := uint64(0); i < n; i++ {
		if e := c[(start+i)%n]; ok(e) {
			return e
		}
	}
	return nil
}

// randomPick starts at a random index and walks like round-robin, so it is
// uniform over eligible endpoints when most are eligible and never loops.
type randomPick struct{}

func (randomPick) Pick(c []*Endpoint, ok func(*Endpoint) bool) *Endpoint {
	n := len(c)
	if n == 0 {
		return nil
	}
	start := rand.IntN(n)
	for i := 0; i < n; i++ {
		if e := c[(start+i)%n]; ok(e) {
			return e
		}
	}
	return nil
}

// leastConn samples a few random candidates and takes the one with the
// fewest open tunnels (power of k choices): O(1) per pick at any pool size,
// and close to exact least-connections in practice. Small pools are
// scanned whole.
type leastConn struct{}

const leastConnSample = 8

func (leastConn) Pick(c []*Endpoint, ok func(*Endpoint) bool) *Endpoint {
	n := len(c)
	if n == 0 {
		return nil
	}
	order := func(i int) int { return i }
	limit := n
	if n > 2*leastConnSample {
		start := rand.IntN(n)
		order = func(i int) int { return (start + i*7919) % n }
		limit = leastConnSample
	}
	// Rank candidates first without consuming slots, then confirm the best.
	var best []*Endpoint
	for i := 0; i < n && len(best) < limit; i++ {
		best = append(best, c[order(i)])
	}
	for len(best) > 0 {
		bi := 0
		for i, e := range best {
			if e.active.Load() < best[bi].active.Load() {
				bi = i
			}
		}
		if ok(best[bi]) {
			return best[bi]
		}
		best = append(best[:bi], best[bi+1:]...)
	}
	// The sample had no eligible endpoint: fall back to a full walk.
	if limit < n {
		return randomPick{}.Pick(c, ok)
	}
	return nil
}

// weighted picks with probability proportional to Weight using a random
// draw over the cumulative weights, then walks on when the drawn endpoint
// is not eligible.
type weighted struct{}

func (*weighted) Pick(c []*Endpoint, ok func(*Endpoint) bool) *Endpoint {
	n := len(c)
	if n == 0 {
		return nil
	}
	total := 0
	for _, e := range c {
		total += e.Weight
	}
	x := rand.IntN(total)
	start := 0
	for i, e := range c {
		if x < e.Weight {
			start = i
			break
		}
		x -= e.Weight
	}
	for i := 0; i < n; i++ {
		if e := c[(start+i)%n]; ok(e) {
			return e
		}
	}
	return nil
}
