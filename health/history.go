package health

// history is a bounded ring of transitions, oldest first on read.
type history struct {
	buf   []Transition
	start int // index of the oldest entry once the ring is full
	full  bool
}

func (h *history) init(n int) { h.buf = make([]Transition, 0, n) }

func (h *history) add(tr Transition) {
	if len(h.buf) < cap(h.buf) {
		h.buf = append(h.buf, tr)
		return
	}
	if cap(h.buf) == 0 {
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
	n := cap(h.buf)
	if len(trs) > n {
		trs = trs[len(trs)-n:]
	}
	h.buf = append(h.buf[:0], trs...)
	h.start, h.full = 0, false
}
