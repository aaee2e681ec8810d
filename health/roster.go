package health

import (
	"sync"
	"sync/atomic"
)

// Roster is a dense list of the members of a gate array whose gate is not
// shut, kept up to date by the records that publish to those gates (Bind).
// A selection strategy draws among the roster's members rather than among
// every endpoint: when 9 in 10 endpoints of a large pool are cooling, a
// draw from the whole pool is refused 9 times in 10, and each refusal
// costs a cache miss (issue 8); a draw from the roster is almost never
// refused.
//
// Members are partitioned into classes fixed at creation (the weighted
// strategy's weight classes), each listed in its own contiguous region, so
// a draw can be made per class.
//
// A change costs O(1) under mu; readers take no lock. A reader racing a
// change may draw a member that has just left (the gate it reads next
// refuses it) or miss one that has just joined, for that one draw: the
// roster narrows the search and the gate decides.
type Roster struct {
	slots []atomic.Int32 // class k's members in slots[base[k]:base[k]+cnt[k]]
	base  []int32        // first slot of each class, plus the end
	cnt   []atomic.Int32 // members in, per class
	in    atomic.Int32   // members in, every class

	mu sync.Mutex
	// mu guards the fields below and serialises the writes of those above.
	pos   []int32 // pos[i]: member i's slot within its class; -1 when out
	class []uint8 // class of each member; fixed
}

// NewRoster returns a roster of len(class) members, member i in class
// class[i] (classes are numbered densely from 0; the roster keeps class,
// which must not change afterwards). Every member starts in,
// as every Gate starts asking: bind member i's gate before relying on the
// roster to leave shut ones out.
func NewRoster(class []uint8) *Roster {
	k := 0
	for _, c := range class {
		k = max(k, int(c)+1)
	}
	ro := &Roster{slots: make([]atomic.Int32, len(class)), base: make([]int32, k+1), cnt: make([]atomic.Int32, k),
		pos: make([]int32, len(class)), class: class}
	for _, c := range class {
		ro.base[c+1]++
	}
	for c := 1; c <= k; c++ {
		ro.base[c] += ro.base[c-1]
	}
	for i, c := range class {
		j := ro.cnt[c].Add(1) - 1
		ro.pos[i] = j
		ro.slots[ro.base[c]+j].Store(int32(i))
	}
	ro.in.Store(int32(len(class)))
	return ro
}

// Classes returns the number of classes.
func (ro *Roster) Classes() int { return len(ro.cnt) }

// In returns how many members are in, over every class.
func (ro *Roster) In() int { return int(ro.in.Load()) }

// Len returns how many members of class k are in.
func (ro *Roster) Len(k int) int { return int(ro.cnt[k].Load()) }

// Member returns the j-th member in of class k, j < Len(k). Racing a
// change, it may return a member that has just left.
func (ro *Roster) Member(k, j int) int { return int(ro.slots[int(ro.base[k])+j].Load()) }

// set puts member i in or out of the roster. A member leaving is replaced
// in its slot by its class's last one; slots beyond the count keep their
// old (valid) member, so a reader that loaded an older count still reads
// some member.
func (ro *Roster) set(i int, in bool) {
	ro.mu.Lock()
	defer ro.mu.Unlock()
	c := ro.class[i]
	base, p := ro.base[c], ro.pos[i]
	switch n := ro.cnt[c].Load(); {
	case in && p < 0:
		ro.slots[base+n].Store(int32(i))
		ro.pos[i] = n
		ro.cnt[c].Store(n + 1)
		ro.in.Add(1)
	case !in && p >= 0:
		last := ro.slots[base+n-1].Load()
		ro.slots[base+p].Store(last)
		ro.pos[last] = p
		ro.pos[i] = -1
		ro.cnt[c].Store(n - 1)
		ro.in.Add(-1)
	}
}
