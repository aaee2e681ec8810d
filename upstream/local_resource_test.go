package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"syscall"
	"testing"

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
