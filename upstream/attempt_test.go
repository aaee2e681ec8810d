package upstream

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// dialPool is a pool over fake upstreams that really dials them, with a
// short handshake timeout; its endpoints start eligible.
func dialPool(t *testing.T, handshake time.Duration, specs ...Spec) (*Pool, *health.Tracker) {
	t.Helper()
	tr := health.NewTracker(health.Config{StartEligible: true, SlowStart: -1}, nil, zerolog.Nop())
	p, err := NewPool(PoolConfig{Strategy: "round-robin", WaitForUpstream: 50 * time.Millisecond},
		DialConfig{ConnectTimeout: 2 * time.Second, HandshakeTimeout: handshake, AllowPrivate: true}, tr, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Update(specs); err != nil {
		t.Fatal(err)
	}
	return p, tr
}

// fakeSpec names a fake upstream; tags select it in a request.
func fakeSpec(name string, fk *upstreamtest.Server, tags ...string) Spec {
	return Spec{Name: name, URL: fk.URL(), Tags: tags}
}

// snapshot returns the health record of the endpoint named name.
func snapshot(t *testing.T, p *Pool, tr *health.Tracker, name string) health.Snapshot {
	t.Helper()
	e := p.Lookup(name)
	if e == nil {
		t.Fatalf("no endpoint %s", name)
	}
	return tr.Snapshot(e.Record())
}

// lastFailure returns the failure of the last attempt of a Dial error.
func lastFailure(t *testing.T, err error) (*AttemptsError, *health.Failure) {
	t.Helper()
	var ae *AttemptsError
	if !errors.As(err, &ae) || len(ae.Attempts) == 0 {
		t.Fatalf("err = %v, want an *AttemptsError", err)
	}
	return ae, ae.Last().Failure
}

// TestDialTargetNeverAccepts: a target that never accepts, behind healthy
// SOCKS5 upstreams that answered the greeting and authentication (the
// fake's HangConnect is microsocks', and dante's until its REP 6 after
// ~31 s). Issue: the client got REP 1 after 3 attempts × the handshake
// timeout and every upstream cooled as timeout/proxy_handshake. Want: one
// attempt, target_timeout at target_connect, no upstream cooled.
func TestDialTargetNeverAccepts(t *testing.T) {
	hang := upstreamtest.Options{Username: "u", Password: "p", Mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}}
	var specs []Spec
	for _, n := range []string{"a", "b", "c"} {
		specs = append(specs, fakeSpec(n, upstreamtest.NewSOCKS5(t, hang)))
	}
	p, tr := dialPool(t, 200*time.Millisecond, specs...)
	start := time.Now()
	_, err := p.Dial(context.Background(), Request{Addr: "192.0.2.1:443"})
	ae, f := lastFailure(t, err)
	if f.Class != health.TargetTimeout || f.Stage != health.StageTargetConnect {
		t.Fatalf("last failure %s/%s, want target_timeout/target_connect (%v)", f.Class, f.Stage, err)
	}
	if len(ae.Attempts) != 1 {
		t.Errorf("%d attempts, want 1: the target is dead for every upstream", len(ae.Attempts))
	}
	if code, ok := TargetReplyCode(err); code != 6 || !ok {
		t.Errorf("TargetReplyCode = %d, %v; want 6", code, ok)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("took %v", el)
	}
	for _, n := range []string{"a", "b", "c"} {
		if s := snapshot(t, p, tr, n); s.State != health.Eligible || len(s.History) != 0 {
			t.Errorf("%s: %v, history %+v: a dead target cooled a healthy upstream", n, s.State, s.History)
		}
	}
}

// TestDialReplyPhaseBudget: the wait for the CONNECT reply has a budget of
// its own: a slow greeting does not eat into the target's time.
func TestDialReplyPhaseBudget(t *testing.T) {
	const budget = 400 * time.Millisecond
	target := upstreamtest.NewTarget(t)
	addr := serveConns(t, func(c net.Conn) {
		var b [3]byte
		if _, err := readFull(c, b[:]); err != nil { // greeting 05 01 00
			return
		}
		time.Sleep(budget * 3 / 4)
		_, _ = c.Write([]byte{5, 0})
		var req [10]byte // 05 01 00 01 a.b.c.d port
		if _, err := readFull(c, req[:]); err != nil {
			return
		}
		time.Sleep(budget * 3 / 4)
		_, _ = c.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 80})
		var one [1]byte
		_, _ = c.Read(one[:])
	})
	cfg := testCfg()
	cfg.HandshakeTimeout = budget
	c, err := dial(t, mustDialer(t, &url.URL{Scheme: "socks5", Host: addr}, cfg), target.Addr())
	if err != nil {
		t.Fatalf("greeting and reply each within the budget, yet: %v", err)
	}
	c.Close()
}

func readFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestFailedTargetWait: an http:// upstream gives no sign of life before
// its answer to CONNECT. A silent one that served a tunnel within the last
// minute may be waiting for the target (target_timeout, not cooled
// whole); here the other upstream reached that target seconds before, so
// the next upstream is tried, serves, and the silent one cools for that
// host:port only (a hung proxy used to fail one tunnel in two for a
// minute). One that did not serve lately is a silent proxy (timeout at
// proxy_handshake, cooled, the next upstream tried).
func TestFailedTargetWait(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	for _, served := range []bool{true, false} {
		t.Run("served lately="+strconv.FormatBool(served), func(t *testing.T) {
			fk := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
			other := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
			p, tr := dialPool(t, 200*time.Millisecond, fakeSpec("http", fk, "x"), fakeSpec("other", other, "x", "y"))
			if served {
				l, err := p.Dial(context.Background(), Request{Addr: target.Addr(), Tags: []string{"x"}})
				if err != nil {
					t.Fatal(err)
				}
				if l.Endpoint.Name != "http" { // round-robin starts with the first
					t.Fatalf("served by %s", l.Endpoint.Name)
				}
				l.Conn.Close()
				l.Done()
				// The next pick of tag x is "other": take it, so that the
				// one after is "http" again (each tag set has its turn).
				l, err = p.Dial(context.Background(), Request{Addr: target.Addr(), Tags: []string{"x"}})
				if err != nil {
					t.Fatal(err)
				}
				if l.Endpoint.Name != "other" {
					t.Fatalf("second pick served by %s", l.Endpoint.Name)
				}
				l.Conn.Close()
				l.Done()
			}
			fk.SetMode(upstreamtest.Mode{Fault: upstreamtest.HangConnect})
			l, err := p.Dial(context.Background(), Request{Addr: target.Addr(), Tags: []string{"x"}})
			s := snapshot(t, p, tr, "http")
			if served {
				if err != nil {
					t.Fatalf("the other upstream, which reached the target, was not tried: %v", err)
				}
				l.Conn.Close()
				l.Done()
				if len(l.Attempts) != 1 || l.Attempts[0].Upstream != "http" {
					t.Fatalf("attempts %+v, want the silent http upstream's", l.Attempts)
				}
				if f := l.Attempts[0].Failure; f.Class != health.TargetTimeout || f.Stage != health.StageTargetConnect {
					t.Fatalf("failure %s/%s, want target_timeout/target_connect (%v)", f.Class, f.Stage, f)
				}
				if s.State != health.Eligible {
					t.Errorf("a silent CONNECT on an upstream that just served cooled it whole: %v", s.State)
				}
				if len(s.Targets) != 1 || s.Targets[0].Host != target.Addr() || s.Targets[0].Reason != health.UpstreamError ||
					s.Targets[0].Stage != health.StageTargetConnect {
					t.Errorf("per-target cooldowns %+v, want upstream_error/target_connect for %s only", s.Targets, target.Addr())
				}
				return
			}
			if err != nil {
				t.Fatalf("the next upstream was not tried: %v", err)
			}
			l.Conn.Close()
			l.Done()
			if s.State != health.Cooling || s.Reason != health.Timeout || s.Stage != health.StageProxyHandshake {
				t.Errorf("a silent http proxy that never served: %v %v/%v, want cooling timeout/proxy_handshake", s.State, s.Reason, s.Stage)
			}
		})
	}
}

// TestDialInvalidTargetNoUpstream: a target no upstream may be asked for
// fails before any upstream is picked and is reported to no record
// (issue: CR/LF in a host reached an HTTP upstream's request line).
func TestDialInvalidTargetNoUpstream(t *testing.T) {
	fk := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	p, tr := dialPool(t, time.Second, fakeSpec("up", fk))
	for _, addr := range []string{"evil.example\r\nX-Injected: 1:443", "a b:443", "a\x00b:80", "127.0.0.1:99999", "h:0", "nohost"} {
		_, err := p.Dial(context.Background(), Request{Addr: addr})
		if !errors.Is(err, ErrInvalidTarget) || !ClientFault(err) {
			t.Errorf("%q: err = %v, want ErrInvalidTarget", addr, err)
		}
	}
	if n := fk.Connections(); n != 0 {
		t.Errorf("the upstream saw %d connections", n)
	}
	if s := snapshot(t, p, tr, "up"); len(s.Failures) != 0 || s.State != health.Eligible {
		t.Errorf("record %v failures %v", s.State, s.Failures)
	}
}

// TestDialRequestRejected: a proxy's answer that blames the client's
// request (squid 400 ERR_INVALID_URL) is reported to no record and no
// other upstream is tried.
func TestDialRequestRejected(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	bad := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 400,
		Header: map[string][]string{"X-Squid-Error": {"ERR_INVALID_URL 0"}}}})
	good := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	p, tr := dialPool(t, time.Second, fakeSpec("squid", bad), fakeSpec("good", good))
	_, err := p.Dial(context.Background(), Request{Addr: target.Addr()})
	ae, _ := lastFailure(t, err)
	if !errors.Is(err, ErrRequestRejected) || len(ae.Attempts) != 1 {
		t.Fatalf("err = %v, want ErrRequestRejected after one attempt", err)
	}
	if s := snapshot(t, p, tr, "squid"); len(s.Failures) != 0 || s.State != health.Eligible {
		t.Errorf("record %v failures %v: the client's URL counted against the upstream", s.State, s.Failures)
	}
}

// TestFailedPlainAnswer: the answers the gateway's plain-HTTP forward path
// builds for squid's own errors (class upstream_error at http_status) are
// read as answers to a forwarded request (issue: 400 ERR_INVALID_URL and
// 403 ERR_ACCESS_DENIED to a GET cooled squid entirely, with a detail
// naming CONNECT).
func TestFailedPlainAnswer(t *testing.T) {
	answer := func(code int, status, squid string) error {
		return &health.Failure{Class: health.UpstreamError, Stage: health.StageHTTPStatus, Target: "127.0.0.1",
			Err: &ConnectStatusError{StatusCode: code, Status: status, SquidError: squid}}
	}
	p, tr := dialPool(t, time.Second, Spec{Name: "squid", URL: &url.URL{Scheme: "http", Host: "127.0.0.1:1"}})
	ctx := context.Background()
	try := func(req Request, err error) error {
		t.Helper()
		a := p.NewAttempts(req)
		e, nerr := a.Next(ctx)
		if nerr != nil {
			t.Fatal(nerr)
		}
		return a.Failed(ctx, e, err)
	}

	stop := try(Request{Addr: "127.0.0.1:8080"}, answer(400, "400 Bad Request", "ERR_INVALID_URL 0"))
	if !errors.Is(stop, ErrRequestRejected) {
		t.Fatalf("400 ERR_INVALID_URL: %v, want the loop stopped with ErrRequestRejected", stop)
	}
	if s := snapshot(t, p, tr, "squid"); len(s.Failures) != 0 {
		t.Fatalf("the client's URL counted against squid: %v", s.Failures)
	}

	if stop := try(Request{Addr: "127.0.0.1:8080"}, answer(403, "403 Forbidden", "ERR_ACCESS_DENIED 0")); stop != nil {
		t.Fatalf("403 ERR_ACCESS_DENIED stopped the loop: %v", stop)
	}
	s := snapshot(t, p, tr, "squid")
	if s.State != health.Eligible || len(s.Targets) != 1 || s.Targets[0].Host != "127.0.0.1:8080" {
		t.Fatalf("403 to a GET: %v targets %+v, want eligible and cooling for 127.0.0.1:8080 only", s.State, s.Targets)
	}
	if d := s.History[len(s.History)-1].Detail; d != `proxy answered the forwarded request with "403 Forbidden" (ERR_ACCESS_DENIED 0)` {
		t.Errorf("detail %q", d)
	}
}

// TestDialAddrTypeScoped: an upstream that cannot reach the target's
// address type (dante without IPv6 answers REP 8) cools for that host only
// and the next upstream is tried; alone, it gives the client REP 8.
// Issue: REP 8 cooled the whole upstream and the client got REP 1.
func TestDialAddrTypeScoped(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // owner: this test; ends when ln closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	v4only := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 8}})
	dual := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, tr := dialPool(t, time.Second, fakeSpec("v4only", v4only, "both", "alone"), fakeSpec("dual", dual, "both"))

	l, err := p.Dial(context.Background(), Request{Addr: ln.Addr().String(), Tags: []string{"both"}})
	if err != nil {
		t.Fatalf("the IPv6-capable upstream was not tried: %v", err)
	}
	l.Conn.Close()
	l.Done()
	if len(l.Attempts) != 1 || l.Attempts[0].Upstream != "v4only" {
		t.Fatalf("attempts before the success: %+v, want v4only's refusal", l.Attempts)
	}
	s := snapshot(t, p, tr, "v4only")
	if s.State != health.Eligible || len(s.Targets) != 1 || s.Targets[0].Host != "::1" {
		t.Fatalf("v4only: %v targets %+v, want eligible and cooling for ::1 only", s.State, s.Targets)
	}

	// The same host again skips v4only; alone, it answers REP 8.
	if _, err := p.Dial(context.Background(), Request{Addr: "[2001:db8::1]:443", Tags: []string{"alone"}}); err == nil {
		t.Fatal("an IPv4-only upstream reached an IPv6 target")
	} else if code, ok := RefusalReplyCode(err); code != 8 || !ok {
		t.Errorf("RefusalReplyCode = %d, %v; want 8 (%v)", code, ok, err)
	}
}

// TestDialTargetRulePort: a healthy upstream reporting closed ports of
// hosts others reached at another port is not cooled (issue: two requests
// to 127.0.0.1:27098 and localhost:27098 cooled an upstream entirely with
// "target failures for 2 hosts that other upstreams reach", because others
// had reached those hosts at 27080).
func TestDialTargetRulePort(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	closed := upstreamtest.ClosedPort(t)
	_, closedPort, _ := net.SplitHostPort(closed)
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	healthy := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, tr := dialPool(t, time.Second, fakeSpec("good", good, "good"), fakeSpec("healthy", healthy, "healthy"))
	ctx := context.Background()
	for _, h := range []string{"127.0.0.1", "localhost"} {
		l, err := p.Dial(ctx, Request{Addr: net.JoinHostPort(h, port), Tags: []string{"good"}})
		if err != nil {
			t.Fatal(err)
		}
		l.Conn.Close()
		l.Done()
	}
	for _, h := range []string{"127.0.0.1", "localhost"} {
		_, err := p.Dial(ctx, Request{Addr: net.JoinHostPort(h, closedPort), Tags: []string{"healthy"}})
		if code, ok := TargetReplyCode(err); code != 5 || !ok {
			t.Fatalf("closed port through a healthy upstream: %v", err)
		}
	}
	if s := snapshot(t, p, tr, "healthy"); s.State != health.Eligible {
		t.Fatalf("healthy: %v %v/%v %+v: closed ports cooled it", s.State, s.Reason, s.Stage, s.History)
	}
	// The rule still holds for the very host:ports others reach after
	// healthy failed them (it is weighed at healthy's next failure).
	healthy.SetMode(upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 4})
	for _, h := range []string{"127.0.0.1", "localhost"} {
		_, _ = p.Dial(ctx, Request{Addr: net.JoinHostPort(h, port), Tags: []string{"healthy"}})
	}
	for _, h := range []string{"127.0.0.1", "localhost"} {
		l, err := p.Dial(ctx, Request{Addr: net.JoinHostPort(h, port), Tags: []string{"good"}})
		if err != nil {
			t.Fatal(err)
		}
		l.Conn.Close()
		l.Done()
	}
	_, _ = p.Dial(ctx, Request{Addr: net.JoinHostPort("127.0.0.1", port), Tags: []string{"healthy"}})
	if s := snapshot(t, p, tr, "healthy"); s.State != health.Cooling || s.Reason != health.UpstreamError {
		t.Fatalf("an upstream failing host:ports others reach: %v %v, want cooling upstream_error", s.State, s.Reason)
	}
}

func TestCanonicalTarget(t *testing.T) {
	for addr, want := range map[string]string{
		"example.com:443":   "example.com:443",
		"Example.COM:443":   "example.com:443",
		"example.com:0443":  "example.com:443",
		"[::1]:80":          "[::1]:80",
		"[example.com]:80":  "example.com:80",
		"127.0.0.1:8080":    "127.0.0.1:8080",
		"[2001:DB8::1]:443": "[2001:db8::1]:443",
	} {
		host, port, err := checkTarget(addr)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if got := canonicalTarget(addr, host, port); got != want {
			t.Errorf("canonicalTarget(%q) = %q, want %q", addr, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { canonicalTarget("example.com:443", "example.com", 443) }); n != 0 {
		t.Errorf("a canonical target allocates %v times", n)
	}
}

// TestLeaseFailFilesHostPort: a failure the gateway reports on a tunnel
// naming only its host (a tunnel's first-byte silence, scope target) is
// filed under the tunnel's host:port, so that it still counts towards the
// silence rule (health's silence.go), and it cools that host only; the
// tunnels that got an answer (Lease.Answered) are the rule's evidence.
func TestLeaseFailFilesHostPort(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	slow := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, tr := dialPool(t, time.Second, fakeSpec("good", good, "good"), fakeSpec("slow", slow, "slow"))
	ctx := context.Background()
	hosts := []string{"127.0.0.1", "localhost"}
	silent := func(h string) {
		t.Helper()
		l, err := p.Dial(ctx, Request{Addr: net.JoinHostPort(h, port), Tags: []string{"slow"}})
		if err != nil {
			t.Fatal(err)
		}
		l.Fail(&health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte, Target: h, Scope: health.ScopeTarget})
		l.Conn.Close()
		l.Done()
	}
	// good's tunnels answer at the hosts after slow was silent there;
	// slow's next silence weighs the rule.
	for _, h := range hosts {
		silent(h)
	}
	for _, h := range hosts {
		l, err := p.Dial(ctx, Request{Addr: net.JoinHostPort(h, port), Tags: []string{"good"}})
		if err != nil {
			t.Fatal(err)
		}
		l.Answered()
		l.Conn.Close()
		l.Done()
	}
	if s := snapshot(t, p, tr, "slow"); s.State != health.Eligible {
		t.Fatalf("slow before its next silence: %v %v, want eligible", s.State, s.Reason)
	}
	// Its next silence, at a third host (reported directly: slow cools
	// for the first two now), weighs the rule: the first two count only
	// if Lease.Fail filed them under host:port.
	tr.Fail(p.Lookup("slow").Record(), &health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte,
		Scope: health.ScopeTarget, Target: "elsewhere.example:443"})
	s := snapshot(t, p, tr, "slow")
	if s.State != health.Cooling || s.Reason != health.SlowBody {
		t.Fatalf("slow silent at 2 hosts that answer others at the same port: %v %v, want cooling slow_body", s.State, s.Reason)
	}
	for _, tc := range s.Targets {
		if tc.Host != "127.0.0.1" && tc.Host != "localhost" && tc.Host != "elsewhere.example" {
			t.Errorf("per-target cooldown filed under %q, want a host", tc.Host)
		}
	}
}

// TestDialGeneralFailureScoped: a SOCKS5 upstream that answers REP 1 to
// CONNECT after a good greeting (microsocks for a name that does not
// resolve, gost for a failed connect) cools for that host only and the
// next upstream is tried; the client gets the upstream's own REP 1. One
// that answers REP 1 for host:ports other upstreams reach still cools
// entirely. Issue: every dead domain a scraper asked for cooled each
// upstream it was tried on, as upstream_error.
func TestDialGeneralFailureScoped(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	micro := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 1}})
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, tr := dialPool(t, time.Second, fakeSpec("micro", micro, "both", "alone"), fakeSpec("good", good, "both", "good"))
	ctx := context.Background()

	// A dead name: micro answers REP 1, good would too (here it connects).
	l, err := p.Dial(ctx, Request{Addr: "dead.example:" + port, Tags: []string{"both"}})
	if err == nil {
		l.Conn.Close()
		l.Done()
		if len(l.Attempts) > 0 && l.Attempts[0].Upstream != "micro" {
			t.Fatalf("attempts before the success: %+v", l.Attempts)
		}
	}
	// Until micro has been tried, rotate: round-robin may have picked good first.
	for range 3 {
		if s := snapshot(t, p, tr, "micro"); len(s.Targets) > 0 {
			break
		}
		if l, err := p.Dial(ctx, Request{Addr: "dead.example:" + port, Tags: []string{"alone"}}); err == nil {
			l.Conn.Close()
			l.Done()
			t.Fatal("micro connected")
		} else if code, ok := RefusalReplyCode(err); code != 1 || !ok {
			t.Errorf("RefusalReplyCode = %d, %v; want the upstream's own 1 (%v)", code, ok, err)
		}
	}
	s := snapshot(t, p, tr, "micro")
	if s.State != health.Eligible || len(s.Targets) != 1 || s.Targets[0].Host != "dead.example" {
		t.Fatalf("micro: %v %v/%v targets %+v, want eligible and cooling for dead.example only", s.State, s.Reason, s.Stage, s.Targets)
	}

	// Hosts that good reaches after micro failed them: micro's own fault
	// (weighed at micro's next failure).
	for _, h := range []string{"127.0.0.1", "localhost"} {
		_, _ = p.Dial(ctx, Request{Addr: net.JoinHostPort(h, port), Tags: []string{"alone"}})
	}
	for _, h := range []string{"127.0.0.1", "localhost"} {
		l, err := p.Dial(ctx, Request{Addr: net.JoinHostPort(h, port), Tags: []string{"good"}})
		if err != nil {
			t.Fatal(err)
		}
		l.Conn.Close()
		l.Done()
	}
	_, _ = p.Dial(ctx, Request{Addr: net.JoinHostPort("127.0.0.2", port), Tags: []string{"alone"}})
	if s := snapshot(t, p, tr, "micro"); s.State != health.Cooling || s.Reason != health.UpstreamError {
		t.Fatalf("an upstream answering REP 1 for host:ports others reach: %v %v, want cooling upstream_error", s.State, s.Reason)
	}
}
