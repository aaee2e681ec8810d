package upstream

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// TestLimitLinesLeftEmpty: once the clients that waited are served, gave
// up or timed out, no line, place or slotWaiters registration is left
// (a line left behind would hold its upstream's capacity for no one),
// also for a client that lined up for more upstreams than maxLines.
func TestLimitLinesLeftEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sp := specs(make([]string, maxLines+3)...)
		for i := range sp {
			sp[i].Name = ""
			sp[i].MaxConns = 1
		}
		tp := newTestPool(t, PoolConfig{WaitForUpstream: time.Second}, nil, sp...)
		var holds []*Endpoint
		for _, e := range tp.Endpoints() {
			if !reserve(e.ld, 1) {
				t.Fatal("cannot hold")
			}
			holds = append(holds, e)
		}
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := context.Background()
				if i == 3 {
					c, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
					defer cancel()
					ctx = c
				}
				a := tp.NewAttempts(Request{Addr: "example.com:443"})
				if e, err := a.Next(ctx); err == nil {
					tp.Release(e)
				}
			}()
		}
		synctest.Wait()
		if got := tp.lines.n.Load(); got < maxLines || got > int64(len(sp)) {
			t.Errorf("%d lines while 4 clients wait for %d upstreams, want %d to %d (each lines up for maxLines)", got, len(sp), maxLines, len(sp))
		}
		if got := tp.slotWaiters.Load(); got != 4 {
			t.Errorf("slotWaiters = %d, want the 4 clients past maxLines", got)
		}
		tp.Release(holds[0]) // two slots free: two clients are served
		tp.Release(holds[len(holds)-1])
		time.Sleep(2 * time.Second) // the others time out
		wg.Wait()
		n := 0
		tp.lines.byLoad.Range(func(_, _ any) bool { n++; return true })
		if got := tp.lines.n.Load(); got != 0 || n != 0 || tp.slotWaiters.Load() != 0 {
			t.Errorf("after every client is gone: %d lines counted, %d kept, slotWaiters %d, want none", got, n, tp.slotWaiters.Load())
		}
		for _, e := range holds[1 : len(holds)-1] {
			tp.Release(e)
		}
	})
}
