package upstream

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// holdTarget is a target on 127.0.0.1:0 that accepts connections and
// keeps them open until the test ends: a long tunnel.
func holdTarget(t *testing.T) string {
	t.Helper()
	ln, addr := upstreamtest.ListenerAddr(t)
	conns := make(chan net.Conn, 16)
	done := make(chan struct{})
	go func() { // owned by the test: ends when ln is closed at cleanup
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return addr
}

// TestRemovedAndBackKeepsActive: an upstream removed from the config and
// put back while its tunnels are open (a config saved in two writes) gets
// its record back, and with it its open-tunnel count. The new endpoint
// started from a fresh count: "active" read 0 with a tunnel open, and
// max_conns = 1 admitted a second one.
func TestRemovedAndBackKeepsActive(t *testing.T) {
	target := holdTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	sp := []Spec{{Name: "a", URL: up.URL(), MaxConns: 1}}
	tp := newTestPool(t, PoolConfig{WaitForUpstream: time.Millisecond}, nil, sp...)

	l, err := tp.Dial(context.Background(), Request{Addr: target})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { l.Conn.Close() })

	if _, removed, err := tp.Update(nil); err != nil || len(removed) != 1 {
		t.Fatalf("removing a: removed %v, err %v", removed, err)
	}
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	a := tp.Lookup("a")
	if a == l.Endpoint {
		t.Fatal("the endpoint put back is the removed *Endpoint; the test needs a rebuilt one")
	}
	if !tp.tr.Eligible(a.Record()) {
		t.Fatal("a put back within 15 minutes is not eligible: its record did not come back")
	}
	if got := a.Active(); got != 1 {
		t.Errorf("Active() = %d with the tunnel from before the removal open, want 1", got)
	}
	if l2, err := tp.Dial(context.Background(), Request{Addr: target}); err == nil {
		l2.Conn.Close()
		l2.Done()
		t.Error("max_conns = 1 admitted a second tunnel after the upstream was removed and put back")
	}

	l.Conn.Close()
	l.Done()
	if got := a.Active(); got != 0 {
		t.Fatalf("Active() = %d after the old tunnel ended, want 0", got)
	}
	l2, err := tp.Dial(context.Background(), Request{Addr: target})
	if err != nil {
		t.Fatalf("the slot the old tunnel freed is still taken: %v", err)
	}
	l2.Conn.Close()
	l2.Done()
}

// TestRemovedAndBackKeepsRateBucket: put back with the same rate, the
// endpoint gets the bucket it had (it came back full: rate = 1 admitted a
// second tunnel within the second).
func TestRemovedAndBackKeepsRateBucket(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	sp := specs("a")
	sp[0].Rate = 1
	tp := newTestPool(t, PoolConfig{}, clock, sp...)
	if got := tp.pickNow(Request{Addr: "example.com:443"}); got != "a" {
		t.Fatalf("first pick: %q", got)
	}
	if _, _, err := tp.Update(nil); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Second / 4) // no token earned back yet
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	if got := tp.pickNow(Request{Addr: "example.com:443"}); got != "" {
		t.Error("rate = 1 admitted a second tunnel within its second after the upstream was removed and put back")
	}
	clock.Advance(time.Second)
	if got := tp.pickNow(Request{Addr: "example.com:443"}); got != "a" {
		t.Errorf("not admitted once a token was earned (got %q)", got)
	}
}

// TestRemovedAndBackNewRate: put back with another rate, the endpoint gets
// a bucket for the new rate (as an edit in place does), and still its
// open-tunnel count.
func TestRemovedAndBackNewRate(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	sp := specs("a")
	sp[0].MaxConns, sp[0].Rate = 2, 1
	tp := newTestPool(t, PoolConfig{}, clock, sp...)
	e := tp.pick(tp.NewAttempts(Request{Addr: "example.com:443"}))
	if e == nil {
		t.Fatal("not admitted")
	}
	if _, _, err := tp.Update(nil); err != nil {
		t.Fatal(err)
	}
	sp[0].Rate = 5
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	a := tp.Lookup("a")
	if got := a.Active(); got != 1 {
		t.Errorf("Active() = %d, want the open tunnel", got)
	}
	if a.limit == e.limit || a.limit == nil || a.limit.rate != 5 {
		t.Error("put back with a new rate, the endpoint kept the old bucket")
	}
	tp.Release(e)
}

// TestRemovedLoadsForgotten: the counters of a removed upstream are kept
// while its tunnels are open or for 15 minutes from its removal, as its
// record is; past both, an upstream put back starts afresh.
func TestRemovedLoadsForgotten(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	tp := newTestPool(t, PoolConfig{}, clock, specs("a", "b")...)
	e := tp.pick(tp.NewAttempts(Request{Addr: "example.com:443", Tags: nil}))
	if e == nil {
		t.Fatal("not admitted")
	}
	busy := e.Name
	if _, _, err := tp.Update(nil); err != nil {
		t.Fatal(err)
	}
	if n := len(tp.gone); n != 2 {
		t.Fatalf("%d removed loads kept, want 2", n)
	}
	clock.Advance(16 * time.Minute)
	if _, _, err := tp.Update(nil); err != nil { // a reload sweeps
		t.Fatal(err)
	}
	if _, ok := tp.gone[tp.keyOf(busy)]; !ok || len(tp.gone) != 1 {
		t.Fatalf("after 16 minutes: kept %d removed loads, want only %s's (a tunnel is open)", len(tp.gone), busy)
	}
	tp.Release(e)
	if _, _, err := tp.Update(nil); err != nil {
		t.Fatal(err)
	}
	if n := len(tp.gone); n != 0 {
		t.Errorf("%d removed loads kept with no tunnel open and 16 minutes gone, want 0", n)
	}
}

// keyOf returns the identity of the spec named name in specs("a", "b").
func (tp *testPool) keyOf(name string) string {
	for _, s := range specs("a", "b") {
		if s.Name == name {
			return Identity(s.URL)
		}
	}
	return ""
}
