package upstream

import (
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
)

// Tag views. A request with tags may use only the endpoints that carry
// all of them. Strategies used to draw from the whole set and let admit
// refuse the others; after a few refusals they walked the set, which gave
// every refused endpoint's turn to the next matching one in list order
// (issue: of squid6 and tiny7, tag http got 200/100 under round-robin;
// a9 and a10 of ten, 225/75; weighted res, 463/587 for weights 1 and 3).
// Instead the set keeps, per tag set asked for, the list of the endpoints
// that match (a view), and strategies pick within it, exactly as within
// the whole set: uniform and weighted draws land only on matching
// endpoints, the round-robin cursor counts over them.
//
// A view holds every matching endpoint, whatever its state: the set is
// immutable (a reload builds a new one, with new views), and states are
// read from the gates at each pick, so a view never goes stale.

// view is the part of a set one tag set selects.
type view struct {
	// idx lists the matching endpoints (indexes into the set), in set
	// order. A single tag's view shares the tag index's list.
	idx []int32
	// all is set when every endpoint of the set matches: strategies then
	// pick from the set itself (with its roster and alias table).
	all bool

	// The weighted strategy's alias table over idx (see newAlias), built
	// at its first weighted pick.
	aliasOnce sync.Once
	keep      []int64
	other     []int32
	total     int64

	// kept is set when the set keeps v (see viewOf): only then does its
	// per-tag-set strategy state below outlive one pick.
	kept bool
	// used is set by every lookup of a kept v and cleared by a sweep: a
	// view the next sweep finds unused is dropped (see sweep).
	used atomic.Bool
	// rr is the round-robin cursor of this tag set (see roundRobin).
	rr atomic.Uint64
	// latency is the lowest-latency strategy's current choice for this
	// tag set, an index into the set plus one (0: none yet).
	latency atomic.Int32
}

// Bounds on the views a set caches (tags come from clients): at most
// maxTagViews tag sets, listing at most viewBudget members together. A
// tag set beyond them gets a view built for its pick, O(the shortest of
// its tags' lists), and not kept. Nor is the view of a tag set no
// endpoint carries (usually a typo): a client looping over made-up tags
// must not use up the bounds, and so the per-tag-set state views hold,
// for the tag sets that exist. Views go with their set, at every reload,
// and within a set the views of tag sets no longer asked for are
// reclaimed (see sweep), so a tag set first asked for after a client went
// through thousands of others still gets a view, and its own turn.
const (
	maxTagViews    = 4096
	viewBudgetBase = 1 << 16
	// sweepEvery: once the bounds are reached, one view in this many that
	// could not be kept sweeps the set's views.
	sweepEvery = maxTagViews / 16
)

// viewBudget is how many members the set's cached views may list
// together: a few times the set, so that memory stays proportional to the
// pool however many tag sets clients ask for.
func (s *set) viewBudget() int64 { return 8*int64(len(s.eps)) + viewBudgetBase }

// tagIndex returns, for each tag, the endpoints carrying it in set order.
// It is built at the first request with tags (one pass over the set; a
// pool whose clients never ask for tags never pays for it).
func (s *set) tagIndex() map[string][]int32 {
	s.tagsOnce.Do(func() {
		m := map[string][]int32{}
		for i, e := range s.eps {
			for k, t := range e.Tags {
				if !slices.Contains(e.Tags[:k], t) { // a tag listed twice counts once
					m[t] = append(m[t], int32(i))
				}
			}
		}
		s.byTag = m
	})
	return s.byTag
}

// viewOf returns the view of a's tags, nil for a request without tags.
func (s *set) viewOf(a admitter) *view {
	tags, key := a.tagSet()
	if len(tags) == 0 {
		return nil
	}
	if x, ok := s.views.Load(key); ok {
		v := x.(*view)
		if !v.used.Load() { // written once per sweep, not per pick
			v.used.Store(true)
		}
		return v
	}
	v := s.newView(tags)
	if len(v.idx) == 0 {
		return v
	}
	if !s.roomFor(v) {
		if s.misses.Add(1)%sweepEvery != 0 {
			return v
		}
		s.sweep()
		if !s.roomFor(v) {
			return v
		}
	}
	v.kept = true
	v.used.Store(true)
	if old, loaded := s.views.LoadOrStore(key, v); loaded {
		return old.(*view)
	}
	s.nviews.Add(1)
	s.viewCost.Add(int64(len(v.idx)))
	return v
}

// roomFor reports whether the bounds leave room to keep v.
func (s *set) roomFor(v *view) bool {
	return s.nviews.Load() < maxTagViews && s.viewCost.Load()+int64(len(v.idx)) <= s.viewBudget()
}

// sweep reclaims views by second chance (a clock sweep over them all): it
// drops each kept view that no lookup used since the previous sweep and
// marks the others unused. A tag set in use keeps its view, and its
// round-robin turn; one a client asked for once is dropped within two
// sweeps. viewOf sweeps only when the bounds are reached, once per
// sweepEvery views it could not keep, so a sweep's O(maxTagViews) is O(1)
// per such view; one sweep runs at a time.
func (s *set) sweep() {
	if !s.sweeping.CompareAndSwap(false, true) {
		return
	}
	defer s.sweeping.Store(false)
	s.views.Range(func(k, x any) bool {
		v := x.(*view)
		if !v.used.Swap(false) && s.views.CompareAndDelete(k, v) {
			s.nviews.Add(-1)
			s.viewCost.Add(-int64(len(v.idx)))
		}
		return true
	})
}

// newView builds the view of tags (at least one): a single tag's list,
// or the shortest of the tags' lists filtered by the others.
func (s *set) newView(tags []string) *view {
	idx := s.tagIndex()
	list := idx[tags[0]]
	if slices.ContainsFunc(tags, func(t string) bool { return t != tags[0] }) {
		short := list
		for _, t := range tags[1:] {
			if l := idx[t]; len(l) < len(short) {
				short = l
			}
		}
		list = make([]int32, 0, len(short))
		for _, i := range short {
			if s.eps[i].HasTags(tags) {
				list = append(list, i)
			}
		}
	}
	if list == nil {
		list = []int32{} // no endpoint matches: restricted must not read as "the whole set"
	}
	return &view{idx: list, all: len(list) == len(s.eps)}
}

// restricted returns the members of v, or nil when the pick is over the
// whole set (no tags, or every endpoint matches).
func (v *view) restricted() []int32 {
	if v == nil || v.all {
		return nil
	}
	return v.idx
}

// weightedDraw draws a member of v with probability proportional to its
// weight, among all of v's members (shut ones included: the caller draws
// again).
func (v *view) weightedDraw(s *set) int {
	v.aliasOnce.Do(func() {
		eps := make([]*Endpoint, len(v.idx))
		for j, i := range v.idx {
			eps[j] = s.eps[i]
		}
		t, total := newAlias(eps)
		v.keep, v.other, v.total = make([]int64, len(t)), make([]int32, len(t)), total
		for j, c := range t {
			v.keep[j], v.other[j] = c.keep, int32(c.other)
		}
	})
	j := rand.IntN(len(v.idx))
	if rand.Int64N(v.total) >= v.keep[j] {
		j = int(v.other[j])
	}
	return int(v.idx[j])
}

// viewState is what a set holds for its views; embedded in set.
type viewState struct {
	tagsOnce sync.Once
	byTag    map[string][]int32 // see tagIndex
	views    sync.Map           // tag key → *view
	nviews   atomic.Int64
	viewCost atomic.Int64 // members listed by the cached views
	misses   atomic.Int64 // views not kept for want of room (see sweep)
	sweeping atomic.Bool  // a sweep runs
}
