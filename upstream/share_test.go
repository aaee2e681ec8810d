package upstream

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

// Fleet hooks (issue 10): limits divided among instances, sessions
// reported to and applied from the fleet.

func TestConnShare(t *testing.T) {
	for _, tc := range []struct{ max, share, want int64 }{
		{3, 3, 1}, {3, 1, 3}, {3, 0, 3}, {5, 2, 3}, {1, 4, 1}, {10, 3, 4}, {0, 3, 0},
	} {
		if got := connShare(tc.max, tc.share); got != tc.want {
			t.Errorf("connShare(%d, %d) = %d, want %d", tc.max, tc.share, got, tc.want)
		}
	}
}

func TestSharedMaxConns(t *testing.T) {
	sp := specs("a")
	sp[0].MaxConns = 3
	tp := newTestPool(t, PoolConfig{WaitForUpstream: 20 * time.Millisecond}, nil, sp...)
	if got := tp.Instances(); got != 1 {
		t.Fatalf("Instances() = %d before any SetInstances, want 1", got)
	}
	tp.SetInstances(3)
	next := func() *Endpoint {
		t.Helper()
		e, err := tp.NewAttempts(Request{Addr: "example.com:443"}).Next(context.Background())
		if err != nil && !errors.Is(err, ErrNoEligible) {
			t.Fatalf("Next: %v", err)
		}
		return e
	}
	held := next()
	if held == nil {
		t.Fatal("first tunnel refused with a share of 1")
	}
	if e := next(); e != nil {
		t.Fatalf("second tunnel admitted with max_conns 3 over 3 instances (active %d)", e.Active())
	}

	// The fleet shrinks to one instance: a waiting client gets the slot at
	// once, without waiting for a release.
	cfg := tp.Config()
	cfg.WaitForUpstream = 10 * time.Second
	if err := tp.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	waiter := make(chan *Endpoint, 1)
	go func() {
		e, _ := tp.NewAttempts(Request{Addr: "example.com:443"}).Next(context.Background())
		waiter <- e
	}()
	for tp.Waiting() == 0 {
		time.Sleep(time.Millisecond) // until the client waits: no event to wait on
	}
	start := time.Now()
	tp.SetInstances(1)
	select {
	case e := <-waiter:
		if e == nil {
			t.Fatal("waiting client not served after the share grew")
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("served after %v", took)
		}
		if n := held.Active(); n != 2 {
			t.Errorf("active %d, want 2", n)
		}
		tp.Release(e)
	case <-time.After(5 * time.Second):
		t.Fatal("waiting client not woken when the share grew")
	}
	tp.Release(held)
}

func TestSharedRate(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	r := newRateLimiter(3, clock)
	// Three instances: a third of the rate each, one token of burst.
	if ok, _ := r.take(3); !ok {
		t.Fatal("first tunnel refused")
	}
	ok, wait := r.take(3)
	if ok {
		t.Fatal("second tunnel in the same instant admitted at 1/s")
	}
	if wait < 900*time.Millisecond || wait > 1100*time.Millisecond {
		t.Errorf("wait %v, want about 1s at a third of 3/s", wait)
	}
	clock.Advance(time.Second)
	if ok, _ := r.take(3); !ok {
		t.Fatal("refused after a second at 1/s")
	}
	// Alone again: the whole rate.
	clock.Advance(time.Second)
	n := 0
	for {
		if ok, _ := r.take(1); !ok {
			break
		}
		n++
	}
	if n != 3 {
		t.Errorf("%d tunnels after 1s alone at 3/s, want 3", n)
	}
}

// fakeFleet records SessionBound calls.
type fakeFleet struct {
	mu    sync.Mutex
	binds []string // "id=key"
	froms []string // each bind's from
}

func (f *fakeFleet) SessionBound(id, key, from string, ttl time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.binds = append(f.binds, id+"="+key)
	f.froms = append(f.froms, from)
}

func (f *fakeFleet) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.binds)
}

func TestSessionReportedToFleet(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	ttl := 8 * time.Minute
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", SessionTTL: ttl, WaitForUpstream: time.Millisecond}, clock, specs("a", "b")...)
	ff := &fakeFleet{}
	tp.SetFleet(ff)
	s := Request{Addr: "example.com:443", Session: "s1"}
	home := tp.use(t, s)
	if ff.count() != 1 || ff.binds[0] != "s1="+tp.Lookup(home).Key {
		t.Fatalf("after the first bind the fleet heard %v", ff.binds)
	}
	for i := 0; i < 6; i++ {
		clock.Advance(ttl / 10)
		tp.use(t, s)
		tp.use(t, Request{Addr: "example.com:443"}) // no session: never reported
	}
	// A use every ttl/10 for 6 × ttl/10: refreshes at 3 and 6 × ttl/10
	// (the first use at least ttl/4 after the last report).
	if n := ff.count(); n != 3 {
		t.Errorf("%d reports over 0.6 × ttl of use, want 3 (bind, then at most one per ttl/4): %v", n, ff.binds)
	}
	// A move is reported at once.
	tp.disable(t, home)
	moved := tp.use(t, s)
	if n := ff.count(); n != 4 || ff.binds[3] != "s1="+tp.Lookup(moved).Key {
		t.Errorf("after the move the fleet heard %v", ff.binds)
	}
}

func TestApplySession(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	ttl := 10 * time.Minute
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", SessionTTL: ttl, WaitForUpstream: time.Millisecond}, clock, specs("a", "b", "c")...)
	key := func(n string) string { return tp.Lookup(n).Key }
	s := Request{Addr: "example.com:443", Session: "remote"}

	// Bound elsewhere to c: this instance follows.
	tp.ApplySession("remote", key("c"), ttl, false)
	for i := 0; i < 4; i++ {
		if got := tp.use(t, s); got != "c" {
			t.Fatalf("use %d: remote session went to %s, want c", i, got)
		}
	}
	// A bulk load (fill) does not undo a live binding.
	tp.ApplySession("remote", key("a"), ttl, true)
	if got := tp.use(t, s); got != "c" {
		t.Fatalf("after a fill the session went to %s, want c", got)
	}
	// A newer message moves it.
	tp.ApplySession("remote", key("b"), ttl, false)
	if got := tp.use(t, s); got != "b" {
		t.Fatalf("after a remote move the session went to %s, want b", got)
	}
	// left is honoured: a binding with a minute left expires after it.
	tp.ApplySession("short", key("a"), time.Minute, false)
	if k := tp.sessions.lookup("short"); k != key("a") {
		t.Fatalf("short session bound to %q", k)
	}
	clock.Advance(time.Minute + time.Second)
	if k := tp.sessions.lookup("short"); k != "" {
		t.Errorf("short session still bound to %q after its time left", k)
	}
	// An unknown upstream is held but ignored by the pick.
	tp.ApplySession("elsewhere", "socks5://not-here:1", ttl, false)
	if got := tp.use(t, Request{Addr: "example.com:443", Session: "elsewhere"}); got == "" {
		t.Error("session bound to an unknown upstream got no upstream")
	}
	// Garbage is ignored.
	tp.ApplySession("", key("a"), ttl, false)
	tp.ApplySession("x", "", ttl, false)
	tp.ApplySession("x", key("a"), 0, false)
	if k := tp.sessions.lookup("x"); k != "" {
		t.Errorf("invalid binding applied: %q", k)
	}
}
