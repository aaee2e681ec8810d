package upstream

import (
	"hash/maphash"
	"math/bits"
	"math/rand/v2"
	"sync/atomic"
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
