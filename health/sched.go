package health

import (
	"container/heap"
	"sync"
	"time"
)

// itemKind says what Run does when an item comes due.
type itemKind uint8

const (
	// kindProbe: the record's cooling ended (or it was added or enabled);
	// move it to probe_allowed and queue one probe.
	kindProbe itemKind = iota
	// kindRamp: a slow-start window opens; wake refused waiters.
	kindRamp
	// kindTarget: a per-target cooldown ended; wake waiters.
	kindTarget
	// kindForget: removed records past goneKeep are forgotten (no rec).
	kindForget
)

// item is one deadline for the prober loop. epoch ties it to the record
// transition that created it; a record that moved on makes it stale.
type item struct {
	at    time.Time // tracker clock
	rec   *Record
	epoch uint64
	kind  itemKind
}

// scheduler is a min-heap of items by deadline, shared by the mutators
// (push) and Run (pop). Its lock is never held while a record lock is
// taken.
type scheduler struct {
	mu sync.Mutex
	// mu guards the field below.
	h itemHeap
}

func (s *scheduler) push(its ...item) {
	s.mu.Lock()
	for _, it := range its {
		heap.Push(&s.h, it)
	}
	s.mu.Unlock()
}

// popDue removes and returns the items due at now (appending to dst) and
// the deadline of the earliest remaining one.
func (s *scheduler) popDue(now time.Time, dst []item) ([]item, time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.h) > 0 && !now.Before(s.h[0].at) {
		dst = append(dst, heap.Pop(&s.h).(item))
	}
	if len(s.h) == 0 {
		return dst, time.Time{}, false
	}
	return dst, s.h[0].at, true
}

type itemHeap []item

func (h itemHeap) Len() int           { return len(h) }
func (h itemHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h itemHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)        { *h = append(*h, x.(item)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = item{}
	*h = old[:len(old)-1]
	return it
}
