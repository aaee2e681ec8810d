package health

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
