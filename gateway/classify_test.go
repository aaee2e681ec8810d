package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestClassifiedFailures drives one client request through a single fake
// upstream in each fault mode and asserts the class and stage the record
// stores, whether it cooled, and what the client was told (issue 4).
func TestClassifiedFailures(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	type want struct {
		class   health.Class
		stage   health.Stage
		cools   bool
		socks   byte // SOCKS5 reply on the SOCKS front (0: not checked)
		status  int  // HTTP status on CONNECT (0: not checked)
		xrotor  string
		connect bool // check the CONNECT front rather than SOCKS
	}
	cases := []struct {
		name  string
		kind  string // socks5 | http
		mode  upstreamtest.Mode
		extra string // additional TOML
		path  string
		want  want
	}{
		{"socks5 refused", "socks5", upstreamtest.Mode{Fault: upstreamtest.Refuse}, "", "/ok",
			want{class: health.Refused, stage: health.StageDial, cools: true, socks: repGeneralFailure}},
		{"http refused", "http", upstreamtest.Mode{Fault: upstreamtest.Refuse}, "", "/ok",
			want{class: health.Refused, stage: health.StageDial, cools: true, status: 502, xrotor: "refused; stage=dial", connect: true}},
		{"socks5 handshake timeout", "socks5", upstreamtest.Mode{Fault: upstreamtest.BlackHole}, "", "/ok",
			want{class: health.Timeout, stage: health.StageProxyHandshake, cools: true, socks: repGeneralFailure}},
		{"http handshake timeout", "http", upstreamtest.Mode{Fault: upstreamtest.BlackHole}, "", "/ok",
			want{class: health.Timeout, stage: health.StageProxyHandshake, cools: true, status: 502, connect: true}},
		{"socks5 auth rejected", "socks5", upstreamtest.Mode{Fault: upstreamtest.RejectAuth}, "", "/ok",
			want{class: health.AuthRejected, stage: health.StageProxyAuth, cools: true, socks: repGeneralFailure}},
		{"socks5 no acceptable method", "socks5", upstreamtest.Mode{Fault: upstreamtest.NoAcceptableMethod}, "", "/ok",
			want{class: health.AuthRejected, stage: health.StageProxyAuth, cools: true, socks: repGeneralFailure}},
		{"http 407", "http", upstreamtest.Mode{Fault: upstreamtest.RejectAuth}, "", "/ok",
			want{class: health.AuthRejected, stage: health.StageProxyAuth, cools: true, status: 502, xrotor: "auth_rejected; stage=proxy_auth", connect: true}},
		{"socks5 garbage", "socks5", upstreamtest.Mode{Fault: upstreamtest.Garbage}, "", "/ok",
			want{class: health.UpstreamError, stage: health.StageProxyHandshake, cools: true, socks: repGeneralFailure}},
		{"http garbage", "http", upstreamtest.Mode{Fault: upstreamtest.Garbage}, "", "/ok",
			want{class: health.UpstreamError, stage: health.StageProxyHandshake, cools: true, status: 502, connect: true}},
		// REP 1 after a good greeting: the proxy is alive and could not
		// do this one request (microsocks for a name that does not
		// resolve): scoped to the host, the client hears REP 1.
		{"socks5 general failure", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 1}, "", "/ok",
			want{class: health.UpstreamError, stage: health.StageTargetConnect, cools: false, socks: repGeneralFailure}},
		{"socks5 target refused", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 5}, "", "/ok",
			want{class: health.TargetUnreachable, stage: health.StageTargetConnect, cools: false, socks: repConnRefused}},
		{"socks5 host unreachable", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 4}, "", "/ok",
			want{class: health.TargetUnreachable, stage: health.StageTargetConnect, cools: false, socks: repHostUnreachable}},
		{"socks5 target timeout", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 6}, "", "/ok",
			want{class: health.TargetTimeout, stage: health.StageTargetConnect, cools: false, socks: repTTLExpired}},
		{"squid target refused", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 503, Header: http.Header{"X-Squid-Error": {"ERR_CONNECT_FAIL 111"}}}, "", "/ok",
			want{class: health.TargetUnreachable, stage: health.StageTargetConnect, cools: false, status: 502, xrotor: "target_unreachable; stage=target_connect", connect: true}},
		{"squid target timeout", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 503, Header: http.Header{"X-Squid-Error": {"ERR_CONNECT_FAIL 110"}}}, "", "/ok",
			want{class: health.TargetTimeout, stage: health.StageTargetConnect, cools: false, status: 504, connect: true}},
		// Policy refusals of one destination (stock squid/tinyproxy answer
		// 403 to CONNECT on port 80): the client is told "not allowed",
		// the upstream cools for that host only.
		{"http CONNECT 403", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 403}, "", "/ok",
			want{class: health.UpstreamError, stage: health.StageProxyHandshake, cools: false, status: 403, xrotor: "upstream_error; stage=proxy_handshake", connect: true}},
		{"socks5 not allowed by ruleset", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 2}, "", "/ok",
			want{class: health.UpstreamError, stage: health.StageTargetConnect, cools: false, socks: repNotAllowed}},
		// A target that never accepts behind a healthy SOCKS5 upstream
		// (it answered the greeting and auth): the target timed out, the
		// client hears so at once (issue: REP 1 after 3 attempts, and the
		// upstream cooled as timeout/proxy_handshake).
		{"socks5 target never accepts", "socks5", upstreamtest.Mode{Fault: upstreamtest.HangConnect}, "", "/ok",
			want{class: health.TargetTimeout, stage: health.StageTargetConnect, cools: false, socks: repTTLExpired}},
		// The client chose an address type the upstream lacks: scoped to
		// the host, and the client hears REP 8 (issue: REP 1, and the whole
		// upstream cooled).
		{"socks5 address type not supported", "socks5", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 8}, "", "/ok",
			want{class: health.UpstreamError, stage: health.StageTargetConnect, cools: false, socks: repAddrNotSupported}},
		// squid's ERR_CONNECT_FAIL 111 is a refused connection: REP 5, not 4.
		{"squid target refused, socks front", "http", upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 503, Header: http.Header{"X-Squid-Error": {"ERR_CONNECT_FAIL 111"}}}, "", "/ok",
			want{class: health.TargetUnreachable, stage: health.StageTargetConnect, cools: false, socks: repConnRefused}},
		// One silent tunnel cools the upstream for that host only: it
		// cannot tell a silent proxy from a tarpit target (silence.go in
		// health; tunnel_tarpit_test.go).
		{"socks5 slow first byte", "socks5", upstreamtest.Mode{Fault: upstreamtest.Accept, FirstByteDelay: 3e9}, "[slow_body]\nfirst_byte = \"300ms\"\n", "/ok",
			want{class: health.SlowBody, stage: health.StageFirstByte, cools: false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var up *upstreamtest.Server
			if tc.kind == "socks5" {
				up = upstreamtest.NewSOCKS5(t, upstreamtest.Options{Username: "u", Password: "pw", Mode: tc.mode})
			} else {
				up = upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Username: "u", Password: "pw", Mode: tc.mode})
			}
			// The short handshake timeout only where a timeout is the
			// point: elsewhere a loaded machine must not turn a slow
			// answer into one.
			handshake := "5s"
			if tc.want.class == health.Timeout || tc.mode.Fault == upstreamtest.HangConnect {
				handshake = "300ms"
			}
			conf := fmt.Sprintf("%s\n%s\n[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\nhandshake_timeout = %q\n[[upstream]]\nurl = %q\nname = \"up\"\n",
				probeConf(target), tc.extra, handshake, up.URL().String())
			srv, _ := startGateway(t, conf)
			switch {
			case tc.want.connect:
				resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL(tc.path), true)
				if err != nil {
					t.Fatal(err)
				}
				if tc.want.status != 0 && resp.StatusCode != tc.want.status {
					t.Errorf("CONNECT status = %d, want %d", resp.StatusCode, tc.want.status)
				}
				if got := resp.Header.Get("X-Rotor-Error"); !strings.HasPrefix(got, tc.want.xrotor) || !strings.Contains(got, "upstream=up") {
					t.Errorf("X-Rotor-Error = %q, want prefix %q naming the upstream", got, tc.want.xrotor)
				}
			case tc.want.socks != 0:
				if code := socksConnect(t, srv.Addr("socks5"), target.Addr()); code != tc.want.socks {
					t.Errorf("SOCKS reply = %#x, want %#x", code, tc.want.socks)
				}
			default:
				resp, err := socksGet(t, srv.Addr("socks5"), "", "", target.URL(tc.path))
				if err == nil && resp.StatusCode == 200 {
					t.Errorf("request succeeded despite %s", tc.name)
				}
			}
			e := srv.Pool().Lookup("up")
			if tc.want.cools {
				// A failure seen after the client was answered (slow body)
				// is reported when the relay ends, just after the client
				// sees the connection close.
				waitState(t, srv, "up", health.Cooling)
			}
			snap := srv.Tracker().Snapshot(e.Record())
			for i := 0; i < 500 && snap.Failures[tc.want.class] == 0 && !tc.want.cools; i++ {
				// Not cooling: a failure seen after the client was
				// answered has no transition to wait for (above).
				time.Sleep(10 * time.Millisecond)
				snap = srv.Tracker().Snapshot(e.Record())
			}
			if snap.Failures[tc.want.class] == 0 {
				t.Fatalf("failures = %v, want a %s", snap.Failures, tc.want.class)
			}
			if tc.want.stage != health.StageNone {
				found := false
				for _, c := range snap.Counts {
					found = found || (c.Class == tc.want.class && c.Stage == tc.want.stage)
				}
				if !found {
					t.Errorf("counts = %+v, want %s at %s", snap.Counts, tc.want.class, tc.want.stage)
				}
			}
			if tc.want.cools {
				if snap.State == health.Eligible {
					t.Errorf("state = eligible, want cooled after %s", tc.want.class)
				}
				h := snap.History[len(snap.History)-1]
				if h.To != health.Cooling || h.Reason != tc.want.class || (tc.want.stage != health.StageNone && h.Stage != tc.want.stage) {
					t.Errorf("last transition = %+v, want to cooling for %s at %s", h, tc.want.class, tc.want.stage)
				}
				if h.Detail == "" || h.At.IsZero() {
					t.Errorf("transition lacks detail or time: %+v", h)
				}
			} else if snap.State != health.Eligible {
				t.Errorf("state = %v, want eligible: a target failure must not cool a healthy upstream", snap.State)
			}
		})
	}
}

// TestPlainHTTPClassification covers the failures only plain-HTTP
// forwarding can see: the target's status and a stalled body.
func TestPlainHTTPClassification(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[slow_body]\nstall = \"300ms\"\n[target_http_error]\nscope = \"upstream\"\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), up.URL().String()))

	resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/status/429"), false)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 429 || bodyOf(resp) != "status 429\n" {
		t.Errorf("the target's 429 must reach the client unchanged, got %d", resp.StatusCode)
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	if h := snap.History[len(snap.History)-1]; h.Reason != health.TargetHTTPError || h.Stage != health.StageHTTPStatus || h.To != health.Cooling {
		t.Errorf("last transition = %+v, want target_http_error at http_status", h)
	}
}

func TestPlainHTTPStalledBodyIsSlow(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[slow_body]\nstall = \"300ms\"\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), up.URL().String()))
	resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/stall/100"), false)
	if err == nil && resp.StatusCode == 200 && len(bodyOf(resp)) == 101 {
		t.Fatal("a stalled body was delivered complete")
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	if h := snap.History[len(snap.History)-1]; h.Reason != health.SlowBody || h.Stage != health.StageBody {
		t.Errorf("last transition = %+v, want slow_body at body", h)
	}
}

// TestPolicyRefusalTriesAnotherUpstream: an upstream that refuses one
// destination by policy (CONNECT 403) is skipped for that host: the
// client is served by another upstream at once, the refusing one stays
// eligible for every other host and is not asked again for this one.
func TestPolicyRefusalTriesAnotherUpstream(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	strict := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 403}})
	open := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nstrategy = \"round-robin\"\n[[upstream]]\nurl = %q\nname = \"strict\"\n[[upstream]]\nurl = %q\nname = \"open\"\n",
		probeConf(target), strict.URL().String(), open.URL().String()))
	for i := range 4 {
		resp, err := socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
	}
	if n := strict.Connections(); n != 1 {
		t.Errorf("the refusing upstream was asked %d times for the same host, want once", n)
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("strict").Record())
	if snap.State != health.Eligible {
		t.Fatalf("the refusing upstream is %v, want eligible (it refused one host)", snap.State)
	}
	// For that host:port only: proxies refuse by port (squid's SSL_ports).
	if len(snap.Targets) != 1 || snap.Targets[0].Host != target.Addr() || snap.Targets[0].Reason != health.UpstreamError {
		t.Errorf("per-target cooldowns = %+v, want one for %s", snap.Targets, target.Addr())
	}
}

// TestPlainHTTPProxyAnswers: an http upstream's own error answers to a
// plain-HTTP request (squid marks them with X-Squid-Error). Issue: squid's
// 400 ERR_INVALID_URL and its 403 ERR_ACCESS_DENIED (stock squid denies
// !Safe_ports) cooled it entirely as upstream_error at http_status, with
// a detail naming CONNECT for a GET.
func TestPlainHTTPProxyAnswers(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	squid := func(code int, tag string) upstreamtest.Mode {
		return upstreamtest.Mode{Fault: upstreamtest.Reply, Code: code, Header: http.Header{"X-Squid-Error": {tag}}}
	}
	t.Run("400 ERR_INVALID_URL is the client's", func(t *testing.T) {
		up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: squid(400, "ERR_INVALID_URL 0")})
		other := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
		srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nstrategy = \"round-robin\"\n[[upstream]]\nurl = %q\nname = \"up\"\n[[upstream]]\nurl = %q\nname = \"other\"\n",
			probeConf(target), up.URL().String(), other.URL().String()))
		resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Rotor-Error") != "bad_request; upstream=up" {
			t.Errorf("client got %d X-Rotor-Error %q, want 400 bad_request; upstream=up", resp.StatusCode, resp.Header.Get("X-Rotor-Error"))
		}
		snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
		if snap.State != health.Eligible || len(snap.Failures) != 0 || len(snap.Targets) != 0 {
			t.Errorf("up: %v failures %v targets %+v: the client's URL counted against the upstream", snap.State, snap.Failures, snap.Targets)
		}
		if other.Forwards() != 0 {
			t.Errorf("the request went on to another upstream")
		}
	})
	t.Run("403 ERR_ACCESS_DENIED cools for the host:port only", func(t *testing.T) {
		up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: squid(403, "ERR_ACCESS_DENIED 0")})
		srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\n[[upstream]]\nurl = %q\nname = \"up\"\n",
			probeConf(target), up.URL().String()))
		resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("client got %d, want 403", resp.StatusCode)
		}
		snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
		if snap.State != health.Eligible || len(snap.Targets) != 1 || snap.Targets[0].Host != target.Addr() {
			t.Fatalf("up: %v targets %+v, want eligible and cooling for %s only", snap.State, snap.Targets, target.Addr())
		}
		h := snap.History[len(snap.History)-1]
		if strings.Contains(h.Detail, "CONNECT") || !strings.Contains(h.Detail, "forwarded request") {
			t.Errorf("detail %q names CONNECT for a GET", h.Detail)
		}
	})
}

// TestExplain pins what the client is told for each kind of pool error.
func TestExplain(t *testing.T) {
	attempts := func(f *health.Failure) error {
		return &upstream.AttemptsError{Attempts: []upstream.Attempt{{Upstream: "up", Failure: f}}}
	}
	classify := func(err error) *health.Failure { return upstream.Classify(err, health.StageProxyHandshake) }
	tests := []struct {
		name   string
		err    error
		socks  byte
		status int
		header string
	}{
		{"invalid target", &health.Failure{Class: health.TargetUnreachable, Stage: health.StageTargetConnect,
			Err: fmt.Errorf("%w: bad", upstream.ErrInvalidTarget)}, repHostUnreachable, 400, "bad_request"},
		{"squid rejects the URL", attempts(classify(&upstream.ConnectStatusError{StatusCode: 400, Status: "400 Bad Request", SquidError: "ERR_INVALID_URL 0"})),
			repHostUnreachable, 400, "bad_request; upstream=up"},
		{"squid rejects a forwarded request", attempts(upstream.PlainAnswer(&upstream.ConnectStatusError{StatusCode: 414, Status: "414 URI Too Long", SquidError: "ERR_TOO_BIG 0"})),
			repHostUnreachable, 414, "bad_request; upstream=up"},
		{"squid refused 111", attempts(classify(&upstream.ConnectStatusError{StatusCode: 503, Status: "503 Service Unavailable", SquidError: "ERR_CONNECT_FAIL 111"})),
			repConnRefused, 502, "target_unreachable; stage=target_connect; upstream=up; kind=refused"},
		{"tinyproxy unable to connect", attempts(classify(&upstream.ConnectStatusError{StatusCode: 500, Status: "500 Unable to connect"})),
			repHostUnreachable, 502, "target_unreachable; stage=target_connect; upstream=up"},
		{"squid dns", attempts(classify(&upstream.ConnectStatusError{StatusCode: 503, Status: "503 Service Unavailable", SquidError: "ERR_DNS_FAIL 0"})),
			repHostUnreachable, 502, "target_unreachable; stage=target_connect; upstream=up; kind=name_not_resolved"},
		{"socks rep 3", attempts(classify(&upstream.ReplyError{Code: 3})), repNetUnreachable, 502, "target_unreachable; stage=target_connect; upstream=up; kind=network_unreachable"},
		{"target timeout", attempts(classify(&upstream.ReplyError{Code: 6})), repTTLExpired, 504, "target_timeout; stage=target_connect; upstream=up; kind=timeout"},
		{"address type", attempts(classify(&upstream.ReplyError{Code: 8})), repAddrNotSupported, 502, "upstream_error; stage=target_connect; upstream=up"},
		{"policy refusal", attempts(classify(&upstream.ReplyError{Code: 2})), repNotAllowed, 403, "upstream_error; stage=target_connect; upstream=up"},
		{"slow body scoped to its target", attempts(&health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte, Scope: health.ScopeTarget}),
			repGeneralFailure, 502, "slow_body; stage=first_byte; upstream=up"},
		{"general failure", attempts(classify(&upstream.ReplyError{Code: 1})), repGeneralFailure, 502, "upstream_error; stage=target_connect; upstream=up"},
		// A cancellation is nobody's failure: never "rotor: context canceled" as an upstream_error.
		{"cancelled", context.Canceled, repGeneralFailure, 503, "canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cf := explain(tt.err)
			if cf.SOCKS != tt.socks || cf.Status != tt.status || cf.Header != tt.header || strings.Contains(cf.Reason, "context canceled") {
				t.Errorf("explain = %#x %d %q, want %#x %d %q (%s)", cf.SOCKS, cf.Status, cf.Header, tt.socks, tt.status, tt.header, cf.Reason)
			}
		})
	}
}

// TestExplainNoEligibleSaysWhetherItWaited: tags no upstream carries fail
// at once, so their reason must not claim a wait; nor may the reason of a
// pool whose wait_for_upstream is "0s" (a nanosecond). Issue: with "0s"
// the 503 said "(waited pool.wait_for_upstream)" after 3 ms.
func TestExplainNoEligibleSaysWhetherItWaited(t *testing.T) {
	for _, tt := range []struct {
		ne   *upstream.NoEligibleError
		want string
	}{
		{&upstream.NoEligibleError{Tags: []string{"nope"}}, `no eligible upstream: no upstream has tags "nope"; check the tag-<tag> parameters of the proxy username (tags match exactly)`},
		{&upstream.NoEligibleError{Tags: []string{"us"}, Matching: 2, Wait: 3 * time.Second},
			`no eligible upstream: none of the 2 upstreams with tags "us" is eligible (waited pool.wait_for_upstream, 3s); retry later`},
		{&upstream.NoEligibleError{Matching: 3, Wait: 10 * time.Second},
			"no upstream proxy became eligible (waited pool.wait_for_upstream, 10s); retry later"},
		{&upstream.NoEligibleError{Matching: 1, AtRate: 1, Wait: time.Nanosecond},
			"no eligible upstream: the only upstream is eligible but at its rate limit (pool.wait_for_upstream is 0s: no wait); retry later"},
		{&upstream.NoEligibleError{Matching: 3, Wait: time.Nanosecond},
			"no upstream proxy is eligible (pool.wait_for_upstream is 0s: no wait); retry later"},
	} {
		cf := explain(tt.ne)
		if cf.Status != http.StatusServiceUnavailable || cf.Reason != tt.want {
			t.Errorf("%+v: %d %q\nwant     %q", tt.ne, cf.Status, cf.Reason, tt.want)
		}
	}
}

// TestOverloadedOutcome: a dial rotor's machine could not make tells the
// client so once (the reason repeated "rotor is out of a local resource"
// with the whole error chain), and is outcome overloaded, at info, with
// one error line for many (it was "failed" at warn, counted as if an
// upstream had failed).
func TestOverloadedOutcome(t *testing.T) {
	srv, logs := newGateway(t, "o.toml", "[[upstream]]\nurl = \"direct://\"\n")
	err := &upstream.AttemptsError{Attempts: []upstream.Attempt{{Upstream: "up",
		Failure: upstream.LocalFailure(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}, health.StageDial)}}}
	cf := explain(err)
	if cf.Status != 503 || cf.Header != "overloaded" || cf.Reason != "rotor is out of a local resource (too many open files); no upstream is blamed" {
		t.Errorf("explain = %d %q %q", cf.Status, cf.Header, cf.Reason)
	}
	for i := 0; i < 3; i++ {
		if got := srv.errOutcome(err); got != "overloaded" || !quietOutcome(got) {
			t.Fatalf("outcome %q (quiet %v), want overloaded, at info", got, quietOutcome(got))
		}
	}
	if n := strings.Count(logs.String(), `"dials fail: rotor is out of a local resource`); n != 1 {
		t.Errorf("%d error lines for 3 overloaded dials, want 1:\n%s", n, logs.String())
	}
}
