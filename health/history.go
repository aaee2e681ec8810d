package health

import "sort"

// history is a bounded ring of transitions, oldest first on read. It grows
// on demand up to its bound: in a pool of 100,000 upstreams most records
// see a handful of transitions, and a ring allocated whole up front was
// half of the pool's memory (2.2 KiB a record).
type history struct {
	buf   []Transition
	max   int // bound on len(buf)
	start int // index of the oldest entry once the ring is full
	full  bool
}

func (h *history) init(n int) { h.max = n }

func (h *history) add(tr Transition) {
	if len(h.buf) < h.max {
		h.buf = append(h.buf, tr)
		return
	}
	if h.max == 0 {
		return
	}
	h.buf[h.start] = tr
	h.start = (h.start + 1) % len(h.buf)
	h.full = true
}

// list returns a copy, oldest first.
func (h *history) list() []Transition {
	out := make([]Transition, 0, len(h.buf))
	out = append(out, h.buf[h.start:]...)
	return append(out, h.buf[:h.start]...)
}

// replace sets the content to trs (oldest first), keeping the newest that
// fit.
func (h *history) replace(trs []Transition) {
	if len(trs) > h.max {
		trs = trs[len(trs)-h.max:]
	}
	h.buf = append(h.buf[:0], trs...)
	h.start, h.full = 0, false
}

// keepLost returns h, the fleet's shared history (oldest first), with the
// entries of local (a record's history) that the store lost put back
// before it, bounded by the store's bound (RemoteState.HistoryBound). An
// entry of local was lost when it came from the store (Instance set) and
// is older than h's oldest while h holds fewer entries than bound: the
// store drops old entries only past its bound (an operator's disable
// drops newer ones), so it did not keep them (a Redis that restarted
// empty). Local entries never shared (Instance empty) are left to the
// store, as before: h replaces them.
func keepLost(local, h []Transition, bound int) []Transition {
	if bound <= 0 || len(h) == 0 || len(h) >= bound {
		return h
	}
	oldest := h[0].At
	for _, tr := range h[1:] {
		if tr.At.Before(oldest) {
			oldest = tr.At
		}
	}
	var out []Transition
	for _, tr := range local {
		if tr.Instance != "" && tr.shared() && tr.At.Before(oldest) {
			out = append(out, tr)
		}
	}
	if len(out) == 0 {
		return h
	}
	out = append(out, h...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	if len(out) > bound {
		out = out[len(out)-bound:]
	}
	return out
}
