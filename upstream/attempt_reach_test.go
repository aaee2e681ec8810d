package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// reachPassword is the bad upstream's password in these tests: it must
// show nowhere in its record.
const reachPassword = "reach-canary-pw-5d1e"

// reachPool is dialPool with a TLS config for https fakes and a
// handshake timeout generous enough for a loaded machine: only the
// upstreams that hang wait it out.
func reachPool(t *testing.T, tlsCfg *tls.Config, specs ...Spec) (*Pool, *health.Tracker) {
	t.Helper()
	tr := health.NewTracker(health.Config{StartEligible: true, SlowStart: -1}, nil, zerolog.Nop())
	p, err := NewPool(PoolConfig{Strategy: "round-robin", WaitForUpstream: 50 * time.Millisecond},
		DialConfig{ConnectTimeout: 5 * time.Second, HandshakeTimeout: 2 * time.Second, AllowPrivate: true, TLS: tlsCfg}, tr, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Update(specs); err != nil {
		t.Fatal(err)
	}
	return p, tr
}

// dialOK dials req through p and closes the tunnel, returning the lease.
func dialOK(t *testing.T, p *Pool, req Request) *Lease {
	t.Helper()
	l, err := p.Dial(context.Background(), req)
	if err != nil {
		t.Fatalf("Dial %s (tags %v): %v", req.Addr, req.Tags, err)
	}
	l.Conn.Close()
	l.Done()
	return l
}

// TestTargetFailureRetriedWhereOthersReach: an upstream that reports a
// target failure (target_timeout, target_unreachable) for a host:port
// another upstream reached seconds before is the one that cannot get
// there. Issue: the failure was the target's, so the client got 504 /
// REP 5 with no retry, and the upstream stayed eligible for that host for
// as long as it was broken (a scraper hitting one site lost one request
// in N). Want: the tunnel is retried on the other upstream, which serves
// it; the broken one cools for that host:port only (upstream_error at
// the failure's stage, "other upstreams reach" in the detail) and keeps
// serving other targets; its password shows nowhere.
func TestTargetFailureRetriedWhereOthersReach(t *testing.T) {
	cases := []struct {
		name      string
		bad       func(t testing.TB, opts upstreamtest.Options) *upstreamtest.Server
		fault     upstreamtest.Mode
		serveBad  bool // the bad upstream serves a tunnel first (an http:// proxy is alive only so)
		wantClass health.Class
	}{
		{"https front, proxy behind it hangs", func(t testing.TB, o upstreamtest.Options) *upstreamtest.Server {
			o.TLS = true
			return upstreamtest.NewHTTPProxy(t, o)
		}, upstreamtest.Mode{Fault: upstreamtest.HangConnect}, false, health.TargetTimeout},
		{"http proxy hangs after serving", upstreamtest.NewHTTPProxy,
			upstreamtest.Mode{Fault: upstreamtest.HangConnect}, true, health.TargetTimeout},
		{"socks5 answers REP 5 (egress firewall)", upstreamtest.NewSOCKS5,
			upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 5}, false, health.TargetUnreachable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			target := upstreamtest.NewTarget(t)
			other := upstreamtest.NewTarget(t)
			bad := tc.bad(t, upstreamtest.Options{Username: "u", Password: reachPassword})
			good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
			var tlsCfg *tls.Config
			if bad.URL().Scheme == "https" {
				tlsCfg = bad.ClientTLS()
			}
			p, tr := reachPool(t, tlsCfg, fakeSpec("bad", bad, "bad"), fakeSpec("good", good, "good"))
			if tc.serveBad {
				dialOK(t, p, Request{Addr: target.Addr(), Tags: []string{"bad"}})
			}
			dialOK(t, p, Request{Addr: target.Addr(), Tags: []string{"good"}}) // another upstream reaches it
			bad.SetMode(tc.fault)

			// The pool's own turn starts with the first upstream: bad.
			l := dialOK(t, p, Request{Addr: target.Addr()})
			if l.Endpoint.Name != "good" || len(l.Attempts) != 1 || l.Attempts[0].Upstream != "bad" {
				t.Fatalf("served by %s after %+v, want good after one failed attempt on bad", l.Endpoint.Name, l.Attempts)
			}
			if f := l.Attempts[0].Failure; f.Class != tc.wantClass || f.Stage != health.StageTargetConnect {
				t.Errorf("bad's failure %s/%s, want %s/target_connect (%v)", f.Class, f.Stage, tc.wantClass, f)
			}

			s := snapshot(t, p, tr, "bad")
			if s.State != health.Eligible {
				t.Errorf("bad: %v %v/%v, want eligible: a client's target must not cool it whole", s.State, s.Reason, s.Stage)
			}
			if len(s.Targets) != 1 || s.Targets[0].Host != target.Addr() || s.Targets[0].Reason != health.UpstreamError ||
				s.Targets[0].Stage != health.StageTargetConnect {
				t.Fatalf("bad's per-target cooldowns %+v, want upstream_error/target_connect for %s", s.Targets, target.Addr())
			}
			if n := len(s.History); n == 0 || !strings.Contains(s.History[n-1].Detail, "other upstreams reach "+target.Addr()) {
				t.Errorf("history %+v: want a detail saying other upstreams reach %s", s.History, target.Addr())
			}
			for _, h := range s.History {
				if strings.Contains(h.Detail, reachPassword) {
					t.Errorf("the password is in the history: %q", h.Detail)
				}
			}

			// It keeps serving other targets, and no longer this one.
			bad.SetMode(upstreamtest.Mode{})
			if l := dialOK(t, p, Request{Addr: other.Addr(), Tags: []string{"bad"}}); l.Endpoint.Name != "bad" {
				t.Errorf("other target served by %s", l.Endpoint.Name)
			}
			_, err := p.Dial(context.Background(), Request{Addr: target.Addr(), Tags: []string{"bad"}})
			var ne *NoEligibleError
			if !errors.As(err, &ne) || ne.HostCooling != 1 {
				t.Errorf("bad for the target it failed: %v, want no eligible upstream, 1 cooling for this host", err)
			}
			if s := snapshot(t, p, tr, "good"); s.State != health.Eligible || len(s.Targets) != 0 {
				t.Errorf("good: %v, targets %+v", s.State, s.Targets)
			}
		})
	}
}

// TestTargetFailureRetryAnswer: when the retry of a target failure fails
// on its own upstream (its proxy refuses the connection), the client is
// still told the target's error (REP 5 from the first upstream), as when
// no retry was made; nobody reached the target after the failure, so the
// first upstream is not cooled for it.
func TestTargetFailureRetryAnswer(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	bad := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	down := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, tr := reachPool(t, nil, fakeSpec("bad", bad, "bad"), fakeSpec("down", down, "down"))
	dialOK(t, p, Request{Addr: target.Addr(), Tags: []string{"down"}})
	bad.SetMode(upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 5})
	down.SetMode(upstreamtest.Mode{Fault: upstreamtest.Refuse})

	_, err := p.Dial(context.Background(), Request{Addr: target.Addr()})
	ae, f := lastFailure(t, err)
	if len(ae.Attempts) != 2 {
		t.Fatalf("attempts %v, want bad then down", err)
	}
	if ae.Last().Upstream != "bad" || f.Class != health.TargetUnreachable {
		t.Errorf("answer: upstream %s %v, want bad's target_unreachable (%v)", ae.Last().Upstream, f, err)
	}
	if code, ok := TargetReplyCode(err); code != 5 || !ok {
		t.Errorf("TargetReplyCode = %d, %v; want 5", code, ok)
	}
	if s := snapshot(t, p, tr, "bad"); s.State != health.Eligible || len(s.Targets) != 0 {
		t.Errorf("bad: %v, targets %+v: nobody reached the target after its failure", s.State, s.Targets)
	}
}

// TestTargetOutageRetriedOnce: a target that goes down after both
// upstreams reached it. The first tunnel after is retried (the target was
// reached lately), both fail, nobody is cooled (nobody reached it after
// the failures); the next tunnel is not retried: another upstream failed
// there since anyone reached it, so it costs the client one attempt, not
// max_attempts, while the target stays down.
func TestTargetOutageRetriedOnce(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	addr := target.Addr()
	var specs []Spec
	for _, n := range []string{"a", "b"} {
		specs = append(specs, fakeSpec(n, upstreamtest.NewSOCKS5(t, upstreamtest.Options{}), n))
	}
	p, tr := reachPool(t, nil, specs...)
	dialOK(t, p, Request{Addr: addr, Tags: []string{"a"}})
	dialOK(t, p, Request{Addr: addr, Tags: []string{"b"}})
	target.Close()

	for i, want := range []int{2, 1, 1} {
		_, err := p.Dial(context.Background(), Request{Addr: addr})
		ae, f := lastFailure(t, err)
		if f.Class != health.TargetUnreachable {
			t.Fatalf("tunnel %d: %v, want target_unreachable", i, err)
		}
		if len(ae.Attempts) != want {
			t.Errorf("tunnel %d: %d attempts (%v), want %d", i, len(ae.Attempts), err, want)
		}
	}
	for _, n := range []string{"a", "b"} {
		if s := snapshot(t, p, tr, n); s.State != health.Eligible || len(s.Targets) != 0 {
			t.Errorf("%s: %v, targets %+v: the target's outage cooled it", n, s.State, s.Targets)
		}
	}
}

// TestTargetFailureRetriedAfterAnotherCooled: two upstreams fail the same
// host:port in turn while a third reaches it. The first one's cooling for
// that host:port (its retry reached it) is no new failure at the target:
// the second one's failure is retried as well (but not cooled: see
// below), the third upstream having
// reached the target since anyone failed there (were the cooling taken
// for a failure after the retry's success, the second request would fail).
func TestTargetFailureRetriedAfterAnotherCooled(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	refuse := upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 5}}
	bad1, bad2 := upstreamtest.NewSOCKS5(t, refuse), upstreamtest.NewSOCKS5(t, refuse)
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, tr := reachPool(t, nil, fakeSpec("bad1", bad1, "first"), fakeSpec("bad2", bad2, "second"),
		fakeSpec("good", good, "good", "first", "second"))
	dialOK(t, p, Request{Addr: target.Addr(), Tags: []string{"good"}})
	for _, n := range []string{"first", "second"} {
		l := dialOK(t, p, Request{Addr: target.Addr(), Tags: []string{n}})
		if l.Endpoint.Name != "good" || len(l.Attempts) != 1 {
			t.Fatalf("tags %s: served by %s after %+v, want good after one failed attempt", n, l.Endpoint.Name, l.Attempts)
		}
	}
	if s := snapshot(t, p, tr, "bad1"); len(s.Targets) != 1 || s.Targets[0].Host != target.Addr() {
		t.Errorf("bad1: targets %+v, want cooling for %s", s.Targets, target.Addr())
	}
	// bad2 failed there within the window of bad1's failure: from here
	// that looks like a target failing for several upstreams (flapping),
	// which cools no one; bad2's requests are still retried, and it cools
	// for the target once bad1's failure is out of the window.
	if s := snapshot(t, p, tr, "bad2"); len(s.Targets) != 0 {
		t.Errorf("bad2: targets %+v, want none while bad1's failure there is in the window", s.Targets)
	}
}
