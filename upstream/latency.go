package upstream

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// Lowest-latency tuning.
const (
	// latencySwitch: the current choice is kept until a candidate's
	// smoothed latency is below latencySwitch/latencySwitchDiv of its own
	// (more than 20% better), so two endpoints of similar speed do not
	// make traffic flap between them.
	latencySwitch    = 4
	latencySwitchDiv = 5
	// latencyExploreEvery: one pick in this many explores: it tries a
	// sampled endpoint not measured yet; one in latencyRemeasureEvery,
	// failing that, the sampled endpoint other than the current choice
	// measured longest ago, if that was at least latencyRefresh seconds
	// ago. Re-measuring is rarer: in a large pool it always finds one to
	// try, cold in the cache, and reads the gates and the clock (one pick
	// in 16 doing so showed in BenchmarkPick at 100,000 endpoints).
	latencyExploreEvery   = 16
	latencyRemeasureEvery = 64
	latencyRefresh        = 1 // seconds
)

// lowestLatency prefers the endpoint with the lowest smoothed dial +
// handshake latency (Endpoint.Latency, recorded by Pool.Dial). It keeps a
// current choice and compares it with a sample of sampleSize candidates per
// pick (the whole pool up to fullScan), so a pick is O(1) and a large pool
// converges to its fastest endpoints over successive picks rather than
// scanning all of them each time. Hysteresis (latencySwitch) stops flapping;
// the current choice is replaced at once when it is not admitted.
//
// Figures go stale: an upstream's latency is only measured when it is
// picked, so one that the choice left (a few slow tunnels, a slow target
// counted against it) would never be picked again to show it is fast. So
// some exploring picks also re-measure measured upstreams, the least
// recently measured of the sample, at most once per latencyRefresh each
// (issue: exploring tried only unmeasured upstreams, and one slow sample
// locked traffic on a proxy 75 times slower for good; at 1000 tunnels a
// second over a dozen upstreams this is about 1% of them). Those picks
// also drop the figure of the sampled candidates that are out (cooling,
// disabled): back, such an upstream is unmeasured, explored first and
// measured afresh, rather than judged by what it did before it failed. (In
// a large pool, where few are sampled, its figure is usually stale by then,
// with no sample for latencyStale seconds, and its first sample replaces
// it: see observeLatency.)
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
	v := s.viewOf(a)
	list := v.restricted()
	n := len(s.eps)
	if list != nil {
		n = len(list)
	}
	if n == 0 {
		return nil
	}
	// A request with tags samples its view and keeps its own choice
	// there: the pool's is usually not among its endpoints.
	cur := -1
	if list != nil {
		cur = int(v.latency.Load()) - 1
	} else if c := l.cur.Load(); c != nil && c.s == s {
		cur = c.i
	}
	var buf [fullScan]int
	c := sample(s, list, &buf, sampleSize)
	best, unknown := -1, -1
	var bestLat uint64
	for _, i := range c {
		switch lat := latUS(s.lds[i].lat.Load()); {
		case lat == 0:
			if unknown < 0 {
				unknown = i
			}
		case best < 0 || lat < bestLat:
			best, bestLat = i, lat
		}
	}
	switch nth := l.picks.Add(1); {
	case nth%latencyRemeasureEvery == 0:
		if e := l.remeasure(s, c, cur, a); e != nil {
			return e
		}
	case unknown >= 0 && (nth%latencyExploreEvery == 0 || best < 0 && cur < 0) && a.admit(s, unknown):
		return s.eps[unknown]
	}
	keep := cur >= 0 && (best < 0 || best == cur || bestLat*latencySwitchDiv >= latUS(s.lds[cur].lat.Load())*latencySwitch)
	if keep && a.admit(s, cur) {
		return s.eps[cur]
	}
	if best >= 0 && a.admit(s, best) {
		switch {
		case best == cur:
		case list != nil:
			v.latency.Store(int32(best + 1))
		default:
			l.cur.Store(&latencyChoice{s: s, i: best})
		}
		return s.eps[best]
	}
	// Neither the choice nor the best sampled is admitted: any sampled
	// endpoint, fastest known first, then anything.
	slices.SortFunc(c, func(x, y int) int {
		lx, ly := latUS(s.lds[x].lat.Load()), latUS(s.lds[y].lat.Load())
		if lx == 0 {
			lx = 1 << 62
		}
		if ly == 0 {
			ly = 1 << 62
		}
		return cmp.Compare(lx, ly)
	})
	for _, i := range c {
		// cur is asked here unless it was asked above (bug: a choice
		// given up for a faster endpoint at its max_conns was skipped
		// here too, and a pool of two found nothing while cur was free).
		if i != best && (i != cur || !keep) && a.admit(s, i) {
			return s.eps[i]
		}
	}
	if n <= fullScan {
		return nil
	}
	return randomPick{}.pick(s, a)
}

// remeasure is the exploring pick of one pick in latencyRemeasureEvery,
// among the sampled candidates c: one not measured yet, else the one
// other than cur measured longest ago, if at least latencyRefresh ago;
// nil when there is none or a refuses it. It also drops the figure of the
// candidates that are out, so that they are measured afresh when they
// are back. Only these picks read the candidates' gates (cold at 100,000
// endpoints) and the clock.
func (l *lowestLatency) remeasure(s *set, c []int, cur int, a admitter) *Endpoint {
	unknown, stale := -1, -1
	var staleAt uint32
	for _, i := range c {
		w := s.lds[i].lat.Load()
		switch {
		case s.hot[i].gate.Shut():
			if w != 0 {
				s.lds[i].lat.CompareAndSwap(w, 0)
			}
		case w == 0:
			if unknown < 0 {
				unknown = i
			}
		case i != cur && (stale < 0 || int32(latAt(w)-staleAt) < 0):
			stale, staleAt = i, latAt(w)
		}
	}
	switch {
	case unknown >= 0 && a.admit(s, unknown):
		return s.eps[unknown]
	case stale >= 0 && latSecond(s.eps[stale].clock.Now())-staleAt >= latencyRefresh && a.admit(s, stale):
		return s.eps[stale]
	}
	return nil
}
