package gateway

import (
	"context"
	"sync"
)

// registry tracks open tunnels so that shutdown can wait for them to
// finish and force-close the rest when the grace period ends.
type registry struct {
	mu     sync.Mutex          // guards the fields below
	open   map[uint64]func()   // tunnel id → force-close
	forced map[uint64]struct{} // open tunnels closeAll already force-closed
	empty  chan struct{}       // closed when open becomes empty; nil while empty
}

// add registers an open tunnel with the function that force-closes it.
func (r *registry) add(id uint64, closeTunnel func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.open == nil {
		r.open = map[uint64]func(){}
	}
	if len(r.open) == 0 {
		r.empty = make(chan struct{})
	}
	r.open[id] = closeTunnel
}

// remove unregisters an ended tunnel. It reports whether closeAll had
// force-closed it (the drain ended it, not its client or target).
func (r *registry) remove(id uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, forced := r.forced[id]
	delete(r.forced, id)
	delete(r.open, id)
	if len(r.open) == 0 && r.empty != nil {
		close(r.empty)
		r.empty = nil
	}
	return forced
}

// count returns the number of open tunnels.
func (r *registry) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

// wait blocks until no tunnel is open (true) or ctx ends (false).
func (r *registry) wait(ctx context.Context) bool {
	r.mu.Lock()
	ch := r.empty
	r.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// closeAll force-closes every open tunnel and returns how many it closed.
// A tunnel an earlier call closed, still ending, is neither closed again
// nor counted (Shutdown calls it twice).
func (r *registry) closeAll() int {
	n, closeThem := r.takeAll()
	closeThem()
	return n
}

// takeAll is closeAll in two steps: it marks the open tunnels closed and
// counts them now, and returns what closes them, so that the drain's line
// that counts them is logged before the tunnels' own lines.
func (r *registry) takeAll() (int, func()) {
	r.mu.Lock()
	closers := make([]func(), 0, len(r.open))
	for id, c := range r.open {
		if _, done := r.forced[id]; done {
			continue
		}
		if r.forced == nil {
			r.forced = map[uint64]struct{}{}
		}
		r.forced[id] = struct{}{}
		closers = append(closers, c)
	}
	r.mu.Unlock()
	return len(closers), func() {
		for _, c := range closers {
			c()
		}
	}
}
