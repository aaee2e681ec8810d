package upstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
)

// TestSessionLateAnswerKeepsFleetMove: in fleet mode, a request picked on
// the session's upstream whose answer arrives after another instance
// moved the session (ApplySession) leaves it where the fleet put it, and
// reports nothing. Bug: the late answer rebound it and reported the old
// binding to the fleet, undoing the move fleet-wide.
func TestSessionLateAnswerKeepsFleetMove(t *testing.T) {
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, specs("a", "b", "c")...)
	ff := &fakeFleet{}
	tp.SetFleet(ff)
	req := Request{Addr: "example.com:443", Session: "f"}
	a := tp.NewAttempts(req)
	home, err := a.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := tp.Lookup("c")
	if home == elsewhere {
		elsewhere = tp.Lookup("b")
	}
	reports := ff.count()
	tp.ApplySession("f", elsewhere.Key, time.Minute, false) // another instance moved it
	a.Succeeded(home)
	a.Release(home)
	if key := tp.SessionKey("f"); key != elsewhere.Key {
		t.Errorf("after a late answer the session is bound to %q, want the fleet's %s", key, elsewhere.Key)
	}
	ff.mu.Lock()
	defer ff.mu.Unlock()
	for _, b := range ff.binds[reports:] {
		if b != "f="+elsewhere.Key { // a refresh of the fleet's binding is fine
			t.Errorf("the late answer reported %v to the fleet, want nothing naming %s", ff.binds[reports:], home.Key)
		}
	}
}

// TestSessionFleetFrom: what the fleet is told a binding replaced: ""
// for a new session, the old key for a move, the key itself for a
// refresh (so that a stale refresh cannot overwrite a move).
func TestSessionFleetFrom(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	ttl := time.Minute
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", SessionTTL: ttl, WaitForUpstream: time.Millisecond}, clock, specs("a", "b", "c")...)
	ff := &fakeFleet{}
	tp.SetFleet(ff)
	ctx := context.Background()
	req := Request{Addr: "example.com:443", Session: "w"}
	a := tp.NewAttempts(req)
	home, err := a.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.Succeeded(home)
	a.Release(home)
	clock.Advance(ttl / 2)
	b := tp.NewAttempts(req)
	if e, err := b.Next(ctx); err != nil || e != home {
		t.Fatalf("second request: %v %v", e, err)
	}
	b.Succeeded(home) // a refresh: ttl/2 since the last report
	refused := &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("connection refused")}
	c := tp.NewAttempts(req)
	e, err := c.Next(ctx)
	if err != nil || e != home {
		t.Fatalf("third request: %v %v", e, err)
	}
	_ = c.Failed(ctx, home, refused)
	moved, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Succeeded(moved)
	c.Release(moved)
	b.Release(home)
	ff.mu.Lock()
	defer ff.mu.Unlock()
	want := []string{"", home.Key, home.Key}
	if len(ff.froms) < 3 {
		t.Fatalf("fleet heard %v, want at least a new binding, a refresh and a move", ff.binds)
	}
	if got := ff.froms[:3]; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || ff.binds[2] != "w="+moved.Key {
		t.Errorf("fleet heard %v from %q, want froms %q with the move to %s third", ff.binds, got, want, moved.Key)
	}
}

// TestSessionHeldRefreshesFleet: a session held by an open tunnel keeps
// its shared TTL fresh: RefreshSessions reports it once ttl/4 has passed
// since its last report, and not again before. Bug: a session in use on
// one instance for longer than its TTL expired in Redis and on the other
// instances, which bound it anew elsewhere.
func TestSessionHeldRefreshesFleet(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	ttl := 8 * time.Second
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", SessionTTL: ttl, WaitForUpstream: time.Millisecond}, clock, specs("a", "b")...)
	ff := &fakeFleet{}
	tp.SetFleet(ff)
	a := tp.NewAttempts(Request{Addr: "example.com:443", Session: "h"})
	e, err := a.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a.Succeeded(e) // reported: a new binding
	n := ff.count()
	tp.RefreshSessions()
	if ff.count() != n {
		t.Fatalf("refreshed at once: %v", ff.binds)
	}
	clock.Advance(ttl/4 + time.Millisecond)
	tp.RefreshSessions()
	if ff.count() != n+1 || ff.binds[n] != "h="+e.Key || ff.froms[n] != e.Key {
		t.Fatalf("after ttl/4 held, the fleet heard %v (from %v), want one refresh of h", ff.binds[n:], ff.froms[n:])
	}
	clock.Advance(ttl / 8)
	tp.RefreshSessions()
	if ff.count() != n+1 {
		t.Errorf("refreshed again before ttl/4: %v", ff.binds[n:])
	}
	a.Release(e) // reported ttl/8 ago: nothing to report
	clock.Advance(ttl)
	tp.RefreshSessions()
	if ff.count() != n+1 {
		t.Errorf("with nothing held the fleet heard %v, want no more refreshes", ff.binds[n+1:])
	}
}
