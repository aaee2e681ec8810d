package upstream

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestSessionFirstRequestsShareUpstream: requests of a new session that
// start together go out through the one upstream the first pick chose,
// before any of them has succeeded. Issue: 8 parallel SOCKS5 connections
// of scraper-session-race1 used 4 upstreams in their first wave, with
// "session moved" lines between them.
func TestSessionFirstRequestsShareUpstream(t *testing.T) {
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, specs("a", "b", "c", "d")...)
	req := Request{Addr: "example.com:443", Session: "race1"}
	const n = 8
	type picked struct {
		a *Attempts
		e *Endpoint
	}
	start := make(chan struct{})
	out := make(chan picked, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			a := tp.NewAttempts(req)
			e, err := a.Next(context.Background())
			if err != nil {
				t.Errorf("Next: %v", err)
				return
			}
			out <- picked{a, e}
		}()
	}
	close(start)
	wg.Wait() // every request has picked; none has succeeded yet
	close(out)
	seen := map[string]int{}
	var all []picked
	for p := range out {
		seen[p.e.Name]++
		all = append(all, p)
	}
	for _, p := range all {
		p.a.Succeeded(p.e)
		p.a.Release(p.e)
	}
	if len(seen) != 1 {
		t.Errorf("the session's first requests went to %v, want one upstream", seen)
	}
	if logs := tp.logs.String(); strings.Contains(logs, "session moved") {
		t.Errorf("session moves logged:\n%s", logs)
	}
}

// TestSessionFirstPickFails: when the attempt on the first pick's upstream
// fails, the retry moves the session, and the requests that followed the
// first pick follow it there; as the session never served elsewhere, no
// move is logged.
func TestSessionFirstPickFails(t *testing.T) {
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, specs("a", "b", "c", "d")...)
	req := Request{Addr: "example.com:443", Session: "f"}
	ctx := context.Background()
	a1, a2 := tp.NewAttempts(req), tp.NewAttempts(req)
	e1, err := a1.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := a2.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e2 != e1 {
		t.Fatalf("second request went to %s, want %s (the first pick's)", e2.Name, e1.Name)
	}
	refused := &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("connection refused")}
	if err := a1.Failed(ctx, e1, refused); err != nil {
		t.Fatal(err)
	}
	e3, err := a1.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if e3 == e1 {
		t.Fatalf("retry went to %s again", e1.Name)
	}
	a1.Succeeded(e3)
	a1.Release(e3)
	if err := a2.Failed(ctx, e2, refused); err != nil {
		t.Fatal(err)
	}
	e4, err := a2.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a2.Succeeded(e4)
	a2.Release(e4)
	if e4 != e3 {
		t.Errorf("the follower's retry went to %s, want %s (where the session moved)", e4.Name, e3.Name)
	}
	if key := tp.SessionKey("f"); key != e3.Key {
		t.Errorf("session bound to %q, want %s", key, e3.Key)
	}
	if logs := tp.logs.String(); strings.Contains(logs, "session moved") {
		t.Errorf("a move logged for a session that never served:\n%s", logs)
	}
}

// TestSessionInUseDoesNotExpire: a session with a tunnel open keeps its
// upstream however long the tunnel lasts, and its TTL slides from the
// tunnel's end. Issue: with session_ttl 3s, a session bound and its
// CONNECT tunnel held 5s, a second request at 4s (tunnel still open) went
// to another upstream.
func TestSessionInUseDoesNotExpire(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	var sp []Spec
	for _, n := range []string{"a", "b", "c"} {
		sp = append(sp, fakeSpec(n, upstreamtest.NewSOCKS5(t, upstreamtest.Options{})))
	}
	clock := healthtest.NewClock(time.Time{})
	ttl := 3 * time.Second
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", SessionTTL: ttl, WaitForUpstream: time.Millisecond}, clock, sp...)
	ff := &fakeFleet{}
	tp.SetFleet(ff)
	ctx := context.Background()
	req := Request{Addr: target.Addr(), Session: "long"}
	dial := func() *Lease {
		t.Helper()
		l, err := tp.Dial(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Conn.Close() })
		return l
	}
	l1 := dial()
	home := l1.Endpoint
	clock.Advance(4 * time.Second) // past the TTL, the tunnel still open
	if key := tp.SessionKey("long"); key != home.Key {
		t.Fatalf("with its tunnel open the session is bound to %q, want %s", key, home.Key)
	}
	l2 := dial()
	if l2.Endpoint != home {
		t.Fatalf("second request at 4s went to %s, want %s", l2.Endpoint.Name, home.Name)
	}
	l2.Done()
	clock.Advance(time.Second)
	reports := ff.count()
	l1.Done() // t = 5s: the last use ends
	if n := ff.count(); n != reports+1 || ff.binds[n-1] != "long="+home.Key {
		t.Errorf("at the tunnel's end the fleet heard %v, want the binding refreshed", ff.binds)
	}
	clock.Advance(ttl - 100*time.Millisecond)
	if key := tp.SessionKey("long"); key != home.Key {
		t.Fatalf("%s after the tunnel closed the session is bound to %q, want %s", ttl-100*time.Millisecond, key, home.Key)
	}
	clock.Advance(200 * time.Millisecond)
	if key := tp.SessionKey("long"); key != "" {
		t.Errorf("the session outlived its TTL after its last use: bound to %q", key)
	}
}
