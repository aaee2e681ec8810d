package gateway

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// closedPort returns 127.0.0.1:PORT where nothing listens (it listened a
// moment ago), so a connect there is refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// TestTargetFailureKindOnTheWire: a client is told what kind of target
// failure the upstream reported (refused, unreachable network or host, a
// name that did not resolve, a timeout), in the 502/504 body and in
// X-Rotor-Error's kind, and a SOCKS5 client in the matching RFC 1928
// code. Issue: a closed port behind dante and an unknown name through
// direct:// both read "the target is unreachable (reported by upstream
// …)", while the log had "socks5 reply 5: connection refused" or "no
// such host".
func TestTargetFailureKindOnTheWire(t *testing.T) {
	squidTag := func(tag string) http.Header { return http.Header{"X-Squid-Error": {tag}} }
	for _, tc := range []struct {
		name   string
		scheme string // "direct", "socks5" or "http"
		mode   upstreamtest.Mode
		status int
		header string
		body   string
		rep    byte
	}{
		{"direct refused", "direct", upstreamtest.Mode{}, 502,
			"target_unreachable; stage=target_connect; upstream=up; kind=refused",
			"the target refused the connection (upstream up, connecting directly: connection refused)", repConnRefused},
		{"dante refused", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 5}, 502,
			"target_unreachable; stage=target_connect; upstream=up; kind=refused",
			"the target refused the connection (reported by upstream up: SOCKS5 reply 5)", repConnRefused},
		{"socks5 network unreachable", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 3}, 502,
			"target_unreachable; stage=target_connect; upstream=up; kind=network_unreachable",
			"the target's network is unreachable (reported by upstream up: SOCKS5 reply 3)", repNetUnreachable},
		{"socks5 host unreachable", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 4}, 502,
			"target_unreachable; stage=target_connect; upstream=up; kind=host_unreachable",
			"the target host is unreachable (reported by upstream up: SOCKS5 reply 4)", repHostUnreachable},
		{"socks5 TTL expired", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 6}, 504,
			"target_timeout; stage=target_connect; upstream=up; kind=timeout",
			"the target timed out (reported by upstream up: SOCKS5 reply 6)", repTTLExpired},
		{"squid refused", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 503, Header: squidTag("ERR_CONNECT_FAIL 111")}, 502,
			"target_unreachable; stage=target_connect; upstream=up; kind=refused",
			"the target refused the connection (reported by upstream up: ERR_CONNECT_FAIL 111)", repConnRefused},
		{"squid dns", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 503, Header: squidTag("ERR_DNS_FAIL 0")}, 502,
			"target_unreachable; stage=target_connect; upstream=up; kind=name_not_resolved",
			"the target's name did not resolve (reported by upstream up: ERR_DNS_FAIL 0)", repHostUnreachable},
		{"squid timeout", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 503, Header: squidTag("ERR_CONNECT_FAIL 110")}, 504,
			"target_timeout; stage=target_connect; upstream=up; kind=timeout",
			"the target timed out (reported by upstream up: ERR_CONNECT_FAIL 110)", repTTLExpired},
		{"tinyproxy unable to connect", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 500, Reason: "Unable to connect"}, 502,
			"target_unreachable; stage=target_connect; upstream=up",
			"the upstream could not connect to the target (it does not say why: refused, unresolvable or unreachable) (reported by upstream up: 500 Unable to connect)", repHostUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := "direct://"
			switch tc.scheme {
			case "socks5":
				url = upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: tc.mode}).URL().String()
			case "http":
				url = upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: tc.mode}).URL().String()
			}
			srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\n"+
				"[[upstream]]\nurl = %q\nname = \"up\"\n", url))
			target := closedPort(t)
			resp, err := httpAsk(t, srv.Addr("http"), string(connectHello(target)))
			if err != nil {
				t.Fatal(err)
			}
			if body := strings.TrimSpace(bodyOf(resp)); resp.StatusCode != tc.status || body != tc.body {
				t.Errorf("CONNECT: %d %q\nwant     %d %q", resp.StatusCode, body, tc.status, tc.body)
			}
			if got := resp.Header.Get("X-Rotor-Error"); got != tc.header {
				t.Errorf("X-Rotor-Error %q, want %q", got, tc.header)
			}
			if rep, err := socksAsk(t, srv.Addr("socks5"), socksHello("", "", target)); err != nil || rep != tc.rep {
				t.Errorf("SOCKS5: rep %#x err %v, want %#x", rep, err, tc.rep)
			}
		})
	}
}

// TestExplainTargetKind: the kinds no loopback socket can show (a name
// direct:// could not resolve, an unreachable network or host on rotor's
// machine, squid's other errnos and tags) say what happened and what
// said so, with the SOCKS5 code of that kind.
func TestExplainTargetKind(t *testing.T) {
	direct := func(err error) error {
		return &upstream.AttemptsError{Attempts: []upstream.Attempt{{Upstream: "direct", Failure: &health.Failure{
			Class: health.TargetUnreachable, Stage: health.StageTargetConnect, Target: "x.example", Err: err}}}}
	}
	squid := func(status int, tag string) error {
		f := upstream.PlainAnswer(&upstream.ConnectStatusError{StatusCode: status, Status: fmt.Sprint(status, " ", http.StatusText(status)), SquidError: tag})
		return &upstream.AttemptsError{Attempts: []upstream.Attempt{{Upstream: "squid", Failure: f}}}
	}
	opErr := func(err error) error { return &net.OpError{Op: "dial", Net: "tcp", Err: err} }
	directTimeout := &upstream.AttemptsError{Attempts: []upstream.Attempt{{Upstream: "direct", Failure: &health.Failure{
		Class: health.TargetTimeout, Stage: health.StageTargetConnect, Target: "192.0.2.1", Err: opErr(os.ErrDeadlineExceeded)}}}}
	for _, tt := range []struct {
		name, kind, reason string
		err                error
		socks              byte
	}{
		{"direct no such host", "name_not_resolved", "the target's name did not resolve (upstream direct, connecting directly: no such host)",
			direct(opErr(&net.DNSError{Err: "no such host", Name: "x.example", IsNotFound: true})), repHostUnreachable},
		{"direct dns server failure", "name_not_resolved", "the target's name did not resolve (upstream direct, connecting directly: server misbehaving)",
			direct(opErr(&net.DNSError{Err: "server misbehaving", Name: "x.example"})), repHostUnreachable},
		{"direct network unreachable", "network_unreachable", "the target's network is unreachable (upstream direct, connecting directly: network is unreachable)",
			direct(opErr(os.NewSyscallError("connect", syscall.ENETUNREACH))), repNetUnreachable},
		{"direct no route", "host_unreachable", "the target host is unreachable (upstream direct, connecting directly: no route to host)",
			direct(opErr(os.NewSyscallError("connect", syscall.EHOSTUNREACH))), repHostUnreachable},
		{"direct connect timeout", "timeout", "the target timed out (upstream direct, connecting directly: connect timed out)",
			directTimeout, repTTLExpired},
		{"squid network unreachable", "network_unreachable", "the target's network is unreachable (reported by upstream squid: ERR_CONNECT_FAIL 101)",
			squid(503, "ERR_CONNECT_FAIL 101"), repNetUnreachable},
		{"squid no route", "host_unreachable", "the target host is unreachable (reported by upstream squid: ERR_CONNECT_FAIL 113)",
			squid(503, "ERR_CONNECT_FAIL 113"), repHostUnreachable},
		{"squid target closed", "closed", "the target closed the connection without answering (reported by upstream squid: ERR_ZERO_SIZE_OBJECT 0)",
			squid(502, "ERR_ZERO_SIZE_OBJECT 0"), repHostUnreachable},
		{"squid target reset", "reset", "the target reset the connection (reported by upstream squid: ERR_READ_ERROR 104)",
			squid(502, "ERR_READ_ERROR 104"), repHostUnreachable},
		{"squid read timeout", "timeout", "the target timed out (reported by upstream squid: ERR_READ_TIMEOUT 0)",
			squid(504, "ERR_READ_TIMEOUT 0"), repTTLExpired},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cf := explain(tt.err)
			if cf.Reason != tt.reason || cf.SOCKS != tt.socks || !strings.HasSuffix(cf.Header, "; kind="+tt.kind) {
				t.Errorf("explain = %#x %q %q\nwant     %#x %q (kind %s)", cf.SOCKS, cf.Header, cf.Reason, tt.socks, tt.reason, tt.kind)
			}
		})
	}
}
