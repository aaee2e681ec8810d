package upstream

import (
	"math/bits"
	"slices"
)

// Weights: the weighted strategy's alias tables and the roster's weight
// classes, both computed once per snapshot (newSet) or view.

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
