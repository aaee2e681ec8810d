package gateway

import (
	"context"
	"sync"
)

// registry tracks open tunnels so that shutdown can wait for them to
// finish and force-close the rest when the grace period ends.
type registry struct {
	mu    sync.Mutex        // guards the fields below
	open  map[uint64]func() // tunnel id → force-close
	empty chan struct{}     // closed when open becomes empty; nil while empty
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

func (r *registry) remove(id uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, id)
	if len(r.open) == 0 && r.empty != nil {
		close(r.empty)
		r.empty = nil
	}
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

// closeAll force-closes every open tunnel and returns how many there were.
func (r *registry) closeAll() int {
	r.mu.Lock()
	closers := make([]func(), 0, len(r.open))
	for _, c := range r.open {
		closers = append(closers, c)
	}
	r.mu.Unlock()
	for _, c := range closers {
		c()
	}
	return len(closers)
}
