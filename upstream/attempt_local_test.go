package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestOutOfFDsBlamesNoUpstream: a dial rotor's own process cannot make
// (EMFILE: out of file descriptors) fails the client with
// ErrLocalResource and cools nothing (bug: it was upstream_error, so a
// burst past the fd limit cooled every upstream in turn, and the pool
// stayed down for their cooldowns after the pressure was gone). No other
// upstream is tried: it would fail the same way. Through a SOCKS5 proxy
// and the direct upstream.
func TestOutOfFDsBlamesNoUpstream(t *testing.T) {
	a := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	b := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	for _, tc := range []struct {
		name  string
		specs []Spec
	}{
		{"socks5", []Spec{{Name: "a", URL: a.URL()}, {Name: "b", URL: b.URL()}}},
		{"direct", []Spec{{Name: "d", URL: &url.URL{Scheme: "direct"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestPool(t, PoolConfig{Strategy: "round-robin", MaxAttempts: 3}, nil, tc.specs...)
			var err error
			withoutFDs(t, func() {
				_, err = tp.Dial(context.Background(), Request{Addr: "127.0.0.1:9"})
			})
			if !errors.Is(err, ErrLocalResource) || !errors.Is(err, syscall.EMFILE) {
				t.Fatalf("Dial with no fd left: %v, want ErrLocalResource wrapping EMFILE", err)
			}
			var ae *AttemptsError
			if !errors.As(err, &ae) || len(ae.Attempts) != 1 {
				t.Errorf("attempts: %v, want one (no other upstream tried)", err)
			}
			for _, s := range tc.specs {
				snap := tp.tr.Snapshot(tp.Lookup(s.Name).Record())
				if snap.State != health.Eligible || len(snap.Counts) != 0 {
					t.Errorf("%s: %s with counts %+v, want eligible with no failure", s.Name, snap.State, snap.Counts)
				}
			}
		})
	}
}

// withoutFDs runs f with the process's open-file limit at 0, so that any
// new descriptor (the dial's socket) fails with EMFILE; those open stay
// usable. Tests of this package do not run in parallel.
func withoutFDs(t *testing.T, f func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = 0
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(fmt.Errorf("lower RLIMIT_NOFILE: %w", err))
	}
	defer func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
	}()
	f()
}

// TestRetryWaitsForAnotherUpstream: when an attempt failed and no other
// upstream is eligible, the request waits for one within
// wait_for_upstream, as a first pick does, and is served by it (bug: it
// failed at once with "all 1 attempts failed", though the client had
// wait_for_upstream to spare and an upstream came back a moment later).
func TestRetryWaitsForAnotherUpstream(t *testing.T) {
	target, addr := upstreamtest.ListenerAddr(t)
	go func() { // owner: the test; ends when the listener closes at cleanup
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	bad := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Refuse}})
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", MaxAttempts: 3, WaitForUpstream: 20 * time.Second}, nil,
		Spec{Name: "bad", URL: bad.URL()}, Spec{Name: "good", URL: good.URL()})
	// good cools (untried by the request): it may come back, so the
	// request waits for it.
	tp.tr.Fail(tp.Lookup("good").Record(), &health.Failure{Class: health.Refused, Stage: health.StageDial})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go tp.tr.Run(ctx) // owner: the test; ends with ctx
	type result struct {
		l   *Lease
		err error
	}
	done := make(chan result, 1)
	go func() { // owner: the test; ends with the Dial
		l, err := tp.Dial(ctx, Request{Addr: addr})
		done <- result{l, err}
	}()
	badRec := tp.Lookup("bad").Record()
	for i := 0; tp.tr.Eligible(badRec); i++ {
		if i > 1000 {
			t.Fatal("the bad upstream never failed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("the request ended once the only eligible upstream failed: %v", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	tp.tr.Enable(tp.Lookup("good").Record())
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Dial: %v, want the upstream that came back", r.err)
		}
		if r.l.Endpoint.Name != "good" {
			t.Errorf("served by %s, want good", r.l.Endpoint.Name)
		}
		r.l.Conn.Close()
		r.l.Done()
	case <-time.After(15 * time.Second):
		t.Fatal("the request still waits 15s after an upstream came back")
	}
}

// TestRetryDoesNotWaitForNothing: after a failed attempt the request
// waits only while an untried upstream may still come; when every one was
// tried, is disabled, or cools for this host only, it fails at once (bug:
// it waited all of wait_for_upstream for nothing, then failed the same way).
func TestRetryDoesNotWaitForNothing(t *testing.T) {
	bad := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Refuse}})
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	for _, tc := range []struct {
		name    string
		prepare func(tp *testPool)
	}{
		{"both tried", func(tp *testPool) {}},
		{"the other disabled", func(tp *testPool) { tp.disable(t, "other") }},
		{"the other cooling for this host", func(tp *testPool) {
			tp.tr.Fail(tp.Lookup("other").Record(), &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus,
				Scope: health.ScopeTarget, Target: "127.0.0.1:9"})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			other := good.URL()
			if tc.name == "both tried" {
				other = bad.URL()
				other.User = url.User("second") // another identity, refused too
			}
			tp := newTestPool(t, PoolConfig{Strategy: "round-robin", MaxAttempts: 3, WaitForUpstream: time.Minute}, nil,
				Spec{Name: "bad", URL: bad.URL()}, Spec{Name: "other", URL: other})
			tc.prepare(tp)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := tp.Dial(ctx, Request{Addr: "127.0.0.1:9"})
			var ae *AttemptsError
			if !errors.As(err, &ae) || ctx.Err() != nil {
				t.Fatalf("Dial: %v (context: %v), want the attempts' failure at once", err, ctx.Err())
			}
		})
	}
}
