package gateway

import (
	"slices"
	"time"
)

// get takes the newest idle connection for key; reused is true when one
// was found.
func (fc *fwdClient) get(key string) (pc *fwdConn, reused bool) {
	for {
		if pc = fc.pop(key); pc == nil {
			return nil, false
		}
		// Bytes (or an end) that came while it was idle are no answer
		// to the request about to go: the connection is not reused. One
		// idle for less than fwdPeekAfter is not peeked at (a busy
		// keep-alive loop would pay a syscall per request): bytes that
		// trail its answer by less than that may as well come after a
		// peek, and its answer's own segments were checked at its end.
		if pc.br.Buffered() == 0 && (time.Since(pc.idleAt) < fwdPeekAfter || !idleReadable(pc.c)) {
			return pc, true
		}
		_ = pc.c.Close()
	}
}

// pop takes the newest idle connection for key still fit for reuse (not
// idle too long, allowed by reusable), closing those that are not.
func (fc *fwdClient) pop(key string) *fwdConn {
	now := time.Now()
	fc.mu.Lock()
	defer fc.mu.Unlock()
	for l := fc.idle[key]; len(l) > 0; l = fc.idle[key] {
		pc := l[len(l)-1]
		l[len(l)-1] = nil
		fc.idle[key] = l[:len(l)-1]
		fc.nidle--
		if now.Sub(pc.idleAt) < fwdIdleTimeout && (fc.reusable == nil || fc.reusable(pc.c)) {
			return pc
		}
		_ = pc.c.Close()
	}
	return nil
}

// put returns pc to the idle pool, or closes it when the pool is full or
// closed.
func (fc *fwdClient) put(pc *fwdConn) {
	fc.mu.Lock()
	pc.idleAt = time.Now() // under mu: sweepIdle reads it of pooled connections
	if fc.closed || fc.nidle >= fwdMaxIdle || len(fc.idle[pc.key]) >= fwdMaxIdlePerTarget {
		fc.mu.Unlock()
		_ = pc.c.Close()
		return
	}
	fc.idle[pc.key] = append(fc.idle[pc.key], pc)
	fc.nidle++
	if fc.sweep == nil {
		fc.sweep = time.AfterFunc(fwdSweepEvery, fc.sweepIdle)
	}
	fc.mu.Unlock()
}

// trimIdle closes idle connections, the longest idle first over all
// targets, until at most keep remain (keep < 0 counts as 0): an upstream's
// max_conns counts every open connection, idle ones too (see
// Server.connRoom).
func (fc *fwdClient) trimIdle(keep int) {
	keep = max(keep, 0)
	var gone []*fwdConn
	fc.mu.Lock()
	for fc.nidle > keep {
		// Each target's list is oldest first: the oldest of all is the
		// oldest of some list's head. Lists are few when the limit is
		// small, and a trim usually closes one.
		var oldest string
		found := false
		for key, l := range fc.idle {
			if len(l) > 0 && (!found || l[0].idleAt.Before(fc.idle[oldest][0].idleAt)) {
				oldest, found = key, true
			}
		}
		if !found {
			break
		}
		l := fc.idle[oldest]
		gone = append(gone, l[0])
		l[0] = nil
		if l = l[1:]; len(l) == 0 {
			delete(fc.idle, oldest)
		} else {
			fc.idle[oldest] = l
		}
		fc.nidle--
	}
	fc.mu.Unlock()
	for _, pc := range gone {
		_ = pc.c.Close()
	}
}

// sweepIdle closes the idle connections that the far end closed or sent
// unasked bytes on (idleGone), and those idle for fwdIdleTimeout, and
// re-arms itself while some remain idle: a pool that empties stops it,
// and put arms it again. It runs on the timer's goroutine, peeking
// outside mu: a connection taken for a request meanwhile (or taken and
// put back: idleAt changed) is left to its user.
func (fc *fwdClient) sweepIdle() {
	type seen struct {
		pc     *fwdConn
		idleAt time.Time
	}
	now := time.Now()
	var stale []*fwdConn
	var peek []seen
	fc.mu.Lock()
	for key, l := range fc.idle {
		keep := l[:0]
		for _, pc := range l {
			if now.Sub(pc.idleAt) >= fwdIdleTimeout {
				stale = append(stale, pc)
			} else {
				keep = append(keep, pc)
				peek = append(peek, seen{pc, pc.idleAt})
			}
		}
		clear(l[len(keep):])
		if len(keep) == 0 {
			delete(fc.idle, key)
		} else {
			fc.idle[key] = keep
		}
	}
	fc.nidle -= len(stale)
	fc.mu.Unlock()
	gone := peek[:0]
	for _, p := range peek {
		if idleGone(p.pc.c) {
			gone = append(gone, p)
		}
	}
	fc.mu.Lock()
	for _, p := range gone {
		l := fc.idle[p.pc.key]
		i := slices.Index(l, p.pc)
		if i < 0 || p.pc.idleAt != p.idleAt {
			continue
		}
		l = slices.Delete(l, i, i+1)
		if len(l) == 0 {
			delete(fc.idle, p.pc.key)
		} else {
			fc.idle[p.pc.key] = l
		}
		fc.nidle--
		stale = append(stale, p.pc)
	}
	fc.sweep = nil
	if fc.nidle > 0 && !fc.closed {
		fc.sweep = time.AfterFunc(fwdSweepEvery, fc.sweepIdle)
	}
	fc.mu.Unlock()
	for _, pc := range stale {
		_ = pc.c.Close()
	}
}

// close closes the idle connections and makes put close the busy ones
// when they finish.
func (fc *fwdClient) close() {
	fc.mu.Lock()
	idle := fc.idle
	fc.idle = map[string][]*fwdConn{}
	fc.nidle = 0
	fc.closed = true
	if fc.sweep != nil {
		fc.sweep.Stop()
		fc.sweep = nil
	}
	fc.mu.Unlock()
	for _, l := range idle {
		for _, pc := range l {
			_ = pc.c.Close()
		}
	}
}
