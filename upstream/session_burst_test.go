package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestSessionBusyUpstreamIsWaitedFor: a request of a session whose
// upstream is only busy (at its max_conns, out of rate tokens) waits for
// it instead of moving the session to another upstream; with a wait too
// short it gets the no-eligible error, and the session keeps its
// upstream. Bug: the second request of a new session found the first
// pick's upstream at max_conns and claimed another, so the session's
// requests went out through two exits.
func TestSessionBusyUpstreamIsWaitedFor(t *testing.T) {
	for _, tc := range []struct {
		name  string
		limit func(*Spec)
	}{
		{"max_conns", func(s *Spec) { s.MaxConns = 1 }},
		{"rate", func(s *Spec) { s.Rate = 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := specs("a", "b", "c")
			for i := range sp {
				tc.limit(&sp[i])
			}
			clock := healthtest.NewClock(time.Time{}) // no token comes due unless the test says so
			tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, clock, sp...)
			req := Request{Addr: "example.com:443", Session: "busy1"}
			ctx := context.Background()
			a1 := tp.NewAttempts(req)
			home, err := a1.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			a2 := tp.NewAttempts(req)
			e2, err := nextExpiring(t, clock, a2)
			var ne *NoEligibleError
			if err == nil {
				a2.Release(e2)
				t.Fatalf("second request of the session went to %s while %s was busy, want it to wait for %s", e2.Name, home.Name, home.Name)
			}
			if !errors.As(err, &ne) {
				t.Fatalf("second request: %v, want a *NoEligibleError", err)
			}
			if !strings.Contains(err.Error(), "session busy1") || !strings.Contains(err.Error(), home.Name) {
				t.Errorf("error %q does not say the session's upstream %s was busy", err, home.Name)
			}
			a1.Succeeded(home)
			a1.Release(home)
			if key := tp.SessionKey("busy1"); key != home.Key {
				t.Errorf("session bound to %q, want %s", key, home.Key)
			}
			clock.Advance(time.Second) // a token again (rate)
			a3 := tp.NewAttempts(req)
			if e3, err := a3.Next(ctx); err != nil || e3 != home {
				t.Errorf("once %s was free the session's request got %v, %v", home.Name, e3, err)
			} else {
				a3.Release(e3)
			}
			if logs := tp.logs.String(); strings.Contains(logs, "session moved") {
				t.Errorf("session moves logged:\n%s", logs)
			}
		})
	}
}

// nextExpiring runs a.Next on the fake clock, moving the clock on by a
// millisecond whenever a timer waits (the wait's, a token's), so that a
// wait of a millisecond expires without a token coming due.
func nextExpiring(t *testing.T, clock *healthtest.Clock, a *Attempts) (*Endpoint, error) {
	t.Helper()
	type result struct {
		e   *Endpoint
		err error
	}
	res := make(chan result, 1)
	go func() {
		e, err := a.Next(context.Background())
		res <- result{e, err}
	}()
	for {
		select {
		case r := <-res:
			return r.e, r.err
		default:
		}
		if clock.Timers() > 0 {
			clock.Advance(time.Millisecond)
		}
		time.Sleep(time.Millisecond) // until Next waits: no event to wait on
	}
}

// TestSessionBurstOneUpstream: a new session's first burst of concurrent
// tunnels, through fake upstreams that each take one tunnel at a time
// (max_conns 1) or a few a second (rate 4), all goes out through one
// upstream: those that find it busy wait for it. When that upstream then
// refuses, the next burst moves the session once, to one other upstream,
// with one "session moved" line.
func TestSessionBurstOneUpstream(t *testing.T) {
	const n = 8
	for _, tc := range []struct {
		name  string
		limit func(*Spec)
	}{
		{"max_conns", func(s *Spec) { s.MaxConns = 1 }},
		// max_conns 100 only makes the pool call the dial gate.
		{"rate", func(s *Spec) { s.Rate, s.MaxConns = 4, 100 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := upstreamtest.NewTarget(t)
			ups := map[string]*upstreamtest.Server{}
			var sp []Spec
			for _, name := range []string{"a", "b", "c"} {
				ups[name] = upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
				s := fakeSpec(name, ups[name])
				tc.limit(&s)
				sp = append(sp, s)
			}
			tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: 30 * time.Second}, nil, sp...)
			// The first burst's dials wait until every request of it is
			// dialling or waiting, so that none is served before the
			// others have picked.
			var gated atomic.Bool
			var dialing atomic.Int64
			open := make(chan struct{})
			gated.Store(true)
			tp.SetBeforeDial(func(*Endpoint) {
				if gated.Load() {
					dialing.Add(1)
					<-open
				}
			})
			req := Request{Addr: target.Addr(), Session: "burst1", User: "scraper"}
			burst := func(gate bool) map[string]int {
				t.Helper()
				got := make(chan string, n)
				var wg sync.WaitGroup
				for range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						l, err := tp.Dial(context.Background(), req)
						if err != nil {
							t.Errorf("Dial: %v", err)
							got <- ""
							return
						}
						got <- l.Endpoint.Name
						l.Conn.Close()
						l.Done()
					}()
				}
				if gate {
					deadline := time.Now().Add(10 * time.Second)
					for dialing.Load()+tp.Waiting() < n {
						if time.Now().After(deadline) {
							close(open)
							t.Fatalf("the burst never settled: %d dialling, %d waiting", dialing.Load(), tp.Waiting())
						}
						time.Sleep(time.Millisecond) // no event to wait on
					}
					gated.Store(false)
					close(open)
				}
				wg.Wait()
				close(got)
				seen := map[string]int{}
				for name := range got {
					seen[name]++
				}
				return seen
			}

			seen := burst(true)
			if len(seen) != 1 {
				t.Fatalf("the new session's first %d tunnels went out through %v, want one upstream", n, seen)
			}
			var home string
			for name := range seen {
				home = name
			}
			if logs := tp.logs.String(); strings.Contains(logs, "session moved") {
				t.Errorf("session moves logged for a session that never moved:\n%s", logs)
			}

			ups[home].SetMode(upstreamtest.Mode{Fault: upstreamtest.Refuse})
			seen = burst(false)
			if len(seen) != 1 || seen[home] > 0 {
				t.Fatalf("with %s refusing, the session's tunnels went out through %v, want one other upstream", home, seen)
			}
			var moved string
			for name := range seen {
				moved = name
			}
			logs := tp.logs.String()
			if c := strings.Count(logs, "session moved"); c != 1 {
				t.Errorf("%d session moves logged, want 1:\n%s", c, logs)
			}
			want := fmt.Sprintf(`"session":"burst1","from":"%s","to":"%s","user":"scraper"`, home, moved)
			if !strings.Contains(logs, want) {
				t.Errorf("log lacks the move %s:\n%s", want, logs)
			}
		})
	}
}
