package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "fake timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

// TestClassify has one row per rule of the table in classify.go.
func TestClassify(t *testing.T) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: err}}
	}
	existing := &health.Failure{Class: health.SlowBody, Stage: health.StageBody, Err: io.EOF}
	cse := func(code int, status, squid string) error {
		return &ConnectStatusError{StatusCode: code, Status: status, SquidError: squid}
	}
	tests := []struct {
		name  string
		err   error
		stage health.Stage // given
		class health.Class
		want  health.Stage
	}{
		{"canceled", context.Canceled, health.StageDial, health.ClassNone, health.StageDial},
		{"canceled wrapped", fmt.Errorf("x: %w", opErr(context.Canceled)), health.StageBody, health.ClassNone, health.StageBody},
		{"econnrefused", opErr(syscall.ECONNREFUSED), health.StageDial, health.Refused, health.StageDial},
		{"ctx deadline", context.DeadlineExceeded, health.StageProxyHandshake, health.Timeout, health.StageProxyHandshake},
		{"os deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), health.StageFirstByte, health.Timeout, health.StageFirstByte},
		{"net.Error timeout", timeoutErr{}, health.StageDial, health.Timeout, health.StageDial},
		{"etimedout", opErr(syscall.ETIMEDOUT), health.StageDial, health.Timeout, health.StageDial},
		{"no acceptable method", ErrNoAcceptableMethod, health.StageProxyHandshake, health.AuthRejected, health.StageProxyAuth},
		{"rfc1929 status", &AuthStatusError{Status: 1}, health.StageProxyHandshake, health.AuthRejected, health.StageProxyAuth},
		{"rep 1", &ReplyError{Code: 1}, health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"rep 2", &ReplyError{Code: 2}, health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"rep 3", &ReplyError{Code: 3}, health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"rep 4", &ReplyError{Code: 4}, health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"rep 5", &ReplyError{Code: 5}, health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"rep 6", &ReplyError{Code: 6}, health.StageProxyHandshake, health.TargetTimeout, health.StageTargetConnect},
		{"rep 7", &ReplyError{Code: 7}, health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"rep 8", &ReplyError{Code: 8}, health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"connect reply wait, proxy alive", &targetWaitError{alive: true, err: os.ErrDeadlineExceeded}, health.StageProxyHandshake, health.TargetTimeout, health.StageTargetConnect},
		{"connect reply wait, liveness unproven", &targetWaitError{err: os.ErrDeadlineExceeded}, health.StageProxyHandshake, health.Timeout, health.StageProxyHandshake},
		{"squid invalid url", cse(400, "400 Bad Request", "ERR_INVALID_URL 0"), health.StageProxyHandshake, health.ClassNone, health.StageProxyHandshake},
		{"squid unsupported request", cse(501, "501 Not Implemented", "ERR_UNSUP_REQ 0"), health.StageProxyHandshake, health.ClassNone, health.StageProxyHandshake},
		{"rep 200", &ReplyError{Code: 200}, health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"407", cse(407, "407 Proxy Authentication Required", ""), health.StageProxyHandshake, health.AuthRejected, health.StageProxyAuth},
		{"401 tinyproxy", cse(401, "401 Unauthorized", ""), health.StageProxyHandshake, health.AuthRejected, health.StageProxyAuth},
		{"squid 111", cse(503, "503 Service Unavailable", "ERR_CONNECT_FAIL 111"), health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"squid 110", cse(503, "503 Service Unavailable", "ERR_CONNECT_FAIL 110"), health.StageProxyHandshake, health.TargetTimeout, health.StageTargetConnect},
		{"squid no errno", cse(503, "503 Service Unavailable", "ERR_CONNECT_FAIL"), health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"squid dns", cse(503, "503 Service Unavailable", "ERR_DNS_FAIL 0"), health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"squid cache access denied", cse(403, "403 Forbidden", "ERR_CACHE_ACCESS_DENIED 0"), health.StageProxyHandshake, health.AuthRejected, health.StageProxyAuth},
		{"squid access denied", cse(403, "403 Forbidden", "ERR_ACCESS_DENIED 0"), health.StageProxyHandshake, health.UpstreamError, health.StageProxyHandshake},
		{"squid other 5xx", cse(502, "502 Bad Gateway", "ERR_ZERO_SIZE_OBJECT 0"), health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"tinyproxy 500", cse(500, "500 Unable to connect", ""), health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"tinyproxy 500 case", cse(500, "500 unable to connect", ""), health.StageProxyHandshake, health.TargetUnreachable, health.StageTargetConnect},
		{"500", cse(500, "500 Internal Server Error", ""), health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"502", cse(502, "502 Bad Gateway", ""), health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"503", cse(503, "503 Service Unavailable", ""), health.StageProxyHandshake, health.UpstreamError, health.StageTargetConnect},
		{"504", cse(504, "504 Gateway Timeout", ""), health.StageProxyHandshake, health.TargetTimeout, health.StageTargetConnect},
		{"403", cse(403, "403 Forbidden", ""), health.StageProxyHandshake, health.UpstreamError, health.StageProxyHandshake},
		{"429", cse(429, "429 Too Many Requests", ""), health.StageProxyHandshake, health.UpstreamError, health.StageProxyHandshake},
		{"400", cse(400, "400 Bad Request", ""), health.StageProxyHandshake, health.UpstreamError, health.StageProxyHandshake},
		{"101", cse(101, "101 Switching Protocols", ""), health.StageProxyHandshake, health.UpstreamError, health.StageProxyHandshake},
		{"malformed", fmt.Errorf("%w: x", ErrMalformedReply), health.StageProxyHandshake, health.UpstreamError, health.StageProxyHandshake},
		{"eof", io.EOF, health.StageBody, health.UpstreamError, health.StageBody},
		{"econnreset", opErr(syscall.ECONNRESET), health.StageBody, health.UpstreamError, health.StageBody},
		{"other", errors.New("boom"), health.StageDial, health.UpstreamError, health.StageDial},
		{"existing failure", fmt.Errorf("wrapped: %w", existing), health.StageDial, health.SlowBody, health.StageBody},
	}
	// Policy refusals of one destination, and a live SOCKS5 proxy's
	// general failure for one request, are scoped to it: the policy
	// refusals (proxies refuse by port) to its host:port, the others to
	// its host.
	// A generic proxy's 502/503 to CONNECT: it could not reach the target.
	policy := map[string]health.Scope{"rep 1": health.ScopeTarget, "rep 2": health.ScopePort, "rep 8": health.ScopeTarget,
		"403": health.ScopePort, "squid access denied": health.ScopePort, "502": health.ScopeTarget, "503": health.ScopeTarget}
	// Answers that blame the client's request are reported to no record.
	rejected := map[string]bool{"squid invalid url": true, "squid unsupported request": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Classify(tt.err, tt.stage)
			if f == nil || f.Class != tt.class || f.Stage != tt.want {
				t.Fatalf("Classify = %+v, want %s/%s", f, tt.class, tt.want)
			}
			if want := policy[tt.name]; f.Scope != want {
				t.Fatalf("Classify scope = %q, want %q", f.Scope, want)
			}
			if got := ClientFault(f); got != rejected[tt.name] {
				t.Fatalf("ClientFault = %v, want %v", got, rejected[tt.name])
			}
			if got := errors.Is(f, ErrAddrType); got != (tt.name == "rep 8") {
				t.Fatalf("errors.Is(ErrAddrType) = %v", got)
			}
			if !errors.Is(f, tt.err) && f != existing {
				t.Fatalf("Failure does not wrap the cause")
			}
		})
	}
	if Classify(nil, health.StageDial) != nil {
		t.Fatal("Classify(nil) != nil")
	}
}

func TestIsCanceled(t *testing.T) {
	for err, want := range map[error]bool{
		nil:                                   false,
		context.Canceled:                      true,
		fmt.Errorf("a: %w", context.Canceled): true,
		context.DeadlineExceeded:              false,
		io.EOF:                                false,
	} {
		if got := IsCanceled(err); got != want {
			t.Errorf("IsCanceled(%v) = %v, want %v", err, got, want)
		}
	}
}

func TestTargetReplyCode(t *testing.T) {
	fail := func(c health.Class, err error) error {
		return &health.Failure{Class: c, Stage: health.StageTargetConnect, Err: err}
	}
	sysErr := func(e error) error {
		return &net.OpError{Op: "dial", Err: &os.SyscallError{Syscall: "connect", Err: e}}
	}
	tests := []struct {
		name   string
		err    error
		code   byte
		wantOK bool
	}{
		{"socks rep 5", &ReplyError{Code: 5}, 5, true},
		{"socks rep 3", &ReplyError{Code: 3}, 3, true},
		{"socks rep 6", &ReplyError{Code: 6}, 6, true},
		{"socks rep 1 is the proxy's", &ReplyError{Code: 1}, 0, false},
		{"squid 111", &ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 111"}, 5, true},
		{"squid 110", &ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 110"}, 6, true},
		{"squid 101", &ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 101"}, 3, true},
		{"squid 113", &ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 113"}, 4, true},
		{"squid 111 through the attempt loop", &AttemptsError{Attempts: []Attempt{{Upstream: "squid", Failure: Classify(&ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 111"}, health.StageProxyHandshake)}}}, 5, true},
		{"squid dns", &ConnectStatusError{StatusCode: 503, SquidError: "ERR_DNS_FAIL 0"}, 4, true},
		{"tinyproxy", &ConnectStatusError{StatusCode: 500, Status: "500 Unable to connect"}, 5, true},
		{"504", &ConnectStatusError{StatusCode: 504, Status: "504 Gateway Timeout"}, 6, true},
		{"407", &ConnectStatusError{StatusCode: 407}, 0, false},
		{"direct refused", fail(health.TargetUnreachable, sysErr(syscall.ECONNREFUSED)), 5, true},
		{"direct net unreachable", fail(health.TargetUnreachable, sysErr(syscall.ENETUNREACH)), 3, true},
		{"direct timeout", fail(health.TargetTimeout, context.DeadlineExceeded), 6, true},
		{"direct dns", fail(health.TargetUnreachable, &net.DNSError{IsNotFound: true}), 4, true},
		{"proxy refused", fail(health.Refused, sysErr(syscall.ECONNREFUSED)), 0, false},
		{"nil", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, ok := TargetReplyCode(tt.err)
			if code != tt.code || ok != tt.wantOK {
				t.Fatalf("TargetReplyCode = %d, %v; want %d, %v", code, ok, tt.code, tt.wantOK)
			}
		})
	}
}

// TestPlainAnswer: a proxy's own error answer to a forwarded plain-HTTP
// request (issue: squid's 400 ERR_INVALID_URL and 403 ERR_ACCESS_DENIED
// to a GET cooled the whole upstream, with a detail naming CONNECT). A
// forwarded answer's fields may be the target's, relayed unchanged, so
// what blames the proxy is scoped to the host (the target rule widens it).
func TestPlainAnswer(t *testing.T) {
	tests := []struct {
		name     string
		ce       ConnectStatusError
		class    health.Class
		stage    health.Stage
		scoped   bool
		rejected bool
	}{
		{"squid invalid url", ConnectStatusError{StatusCode: 400, Status: "400 Bad Request", SquidError: "ERR_INVALID_URL 0"}, health.ClassNone, health.StageHTTPStatus, false, true},
		{"squid access denied", ConnectStatusError{StatusCode: 403, Status: "403 Forbidden", SquidError: "ERR_ACCESS_DENIED 0"}, health.UpstreamError, health.StageHTTPStatus, true, false},
		{"squid too big", ConnectStatusError{StatusCode: 413, Status: "413 Payload Too Large", SquidError: "ERR_TOO_BIG 0"}, health.ClassNone, health.StageHTTPStatus, false, true},
		// The target's answer head over squid's limit: not the client's
		// request (it was answered as one, and never retried elsewhere).
		{"squid answer too big", ConnectStatusError{StatusCode: 502, Status: "502 Bad Gateway", SquidError: "ERR_TOO_BIG 0"}, health.UpstreamError, health.StageHTTPStatus, true, false},
		{"squid answer body too big", ConnectStatusError{StatusCode: 403, Status: "403 Forbidden", SquidError: "ERR_TOO_BIG 0"}, health.UpstreamError, health.StageHTTPStatus, true, false},
		{"squid other 4xx", ConnectStatusError{StatusCode: 411, Status: "411 Length Required", SquidError: "ERR_INVALID_REQ 0"}, health.ClassNone, health.StageHTTPStatus, false, true},
		{"squid 429", ConnectStatusError{StatusCode: 429, Status: "429 Too Many Requests", SquidError: "ERR_X 0"}, health.UpstreamError, health.StageHTTPStatus, true, false},
		{"squid cache access denied", ConnectStatusError{StatusCode: 407, Status: "407 Proxy Authentication Required", SquidError: "ERR_CACHE_ACCESS_DENIED 0"}, health.AuthRejected, health.StageProxyAuth, true, false},
		{"squid connect fail", ConnectStatusError{StatusCode: 503, Status: "503 Service Unavailable", SquidError: "ERR_CONNECT_FAIL 111"}, health.TargetUnreachable, health.StageTargetConnect, false, false},
		{"squid read timeout", ConnectStatusError{StatusCode: 504, Status: "504 Gateway Timeout", SquidError: "ERR_READ_TIMEOUT 0"}, health.TargetTimeout, health.StageTargetConnect, false, false},
		{"squid zero size", ConnectStatusError{StatusCode: 502, Status: "502 Bad Gateway", SquidError: "ERR_ZERO_SIZE_OBJECT 0"}, health.TargetUnreachable, health.StageTargetConnect, false, false},
		{"squid read error (the target reset)", ConnectStatusError{StatusCode: 502, Status: "502 Bad Gateway", SquidError: "ERR_READ_ERROR 104"}, health.TargetUnreachable, health.StageTargetConnect, false, false},
		{"squid shutting down", ConnectStatusError{StatusCode: 503, Status: "503 Service Unavailable", SquidError: "ERR_SHUTTING_DOWN 0"}, health.UpstreamError, health.StageHTTPStatus, true, false},
		{"tinyproxy unable to connect", ConnectStatusError{StatusCode: 500, Status: "500 Unable to connect"}, health.TargetUnreachable, health.StageTargetConnect, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := PlainAnswer(&tt.ce)
			if f.Class != tt.class || f.Stage != tt.stage {
				t.Fatalf("PlainAnswer = %s/%s, want %s/%s", f.Class, f.Stage, tt.class, tt.stage)
			}
			if got := f.Scope == health.ScopeTarget || f.Scope == health.ScopePort; got != tt.scoped {
				t.Errorf("scoped = %v, want %v", got, tt.scoped)
			}
			if got, want := f.Scope == health.ScopePort, tt.name == "squid access denied"; got != want {
				t.Errorf("scope %q: per host:port %v, want %v (a policy refusal only)", f.Scope, got, want)
			}
			if got := ClientFault(f); got != tt.rejected {
				t.Errorf("ClientFault = %v, want %v", got, tt.rejected)
			}
			if msg := f.Error(); strings.Contains(msg, "answered CONNECT") || !strings.Contains(msg, "answered the forwarded request") {
				t.Errorf("detail %q: want it to name the forwarded request, not CONNECT", msg)
			}
			if tt.ce.Plain {
				t.Error("PlainAnswer modified its argument")
			}
			// What the gateway's forward path builds today goes the same way
			// through the attempt loop's plainAnswer.
			built := &health.Failure{Class: health.UpstreamError, Stage: health.StageHTTPStatus, Target: "h", Err: &tt.ce}
			if tt.ce.SquidError != "" && tt.class != health.AuthRejected && !tt.class.IsTargetFailure() {
				g := plainAnswer(built)
				if g.Class != f.Class || g.Stage != f.Stage || g.Scope != f.Scope || g.Target != "h" {
					t.Errorf("plainAnswer = %+v, want %+v with target h", g, f)
				}
			}
		})
	}
	// A CONNECT answer is never re-read as a plain one.
	cf := Classify(&ConnectStatusError{StatusCode: 403, Status: "403 Forbidden", SquidError: "ERR_ACCESS_DENIED 0"}, health.StageProxyHandshake)
	if g := plainAnswer(cf); g != cf {
		t.Errorf("plainAnswer changed a CONNECT failure: %+v", g)
	}
}

// TestForAddrType: an IPv6 target through an IPv4-only upstream is an
// address-type refusal scoped to the host, whatever the proxy says.
func TestForAddrType(t *testing.T) {
	at := func(err error) *health.Failure { return Classify(err, health.StageProxyHandshake) }
	tests := []struct {
		name string
		f    *health.Failure
		host string
		want bool
	}{
		{"dante rep 8", at(&ReplyError{Code: 8}), "::1", true},
		{"rep 8, name", at(&ReplyError{Code: 8}), "example.com", true},
		{"rep 3, IPv6", at(&ReplyError{Code: 3}), "2001:db8::1", true},
		{"rep 3, IPv4", at(&ReplyError{Code: 3}), "192.0.2.1", false},
		{"rep 3, 4in6", at(&ReplyError{Code: 3}), "::ffff:192.0.2.1", false},
		{"rep 5, IPv6", at(&ReplyError{Code: 5}), "::1", false},
		{"squid 101, IPv6", at(&ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 101"}), "::1", true},
		{"squid 101, IPv4", at(&ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 101"}), "192.0.2.1", false},
		{"squid 97, name", at(&ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 97"}), "example.com", true},
		{"squid 111, IPv6", at(&ConnectStatusError{StatusCode: 503, SquidError: "ERR_CONNECT_FAIL 111"}), "::1", false},
		{"tinyproxy 500, IPv6", at(&ConnectStatusError{StatusCode: 500, Status: "500 Unable to connect"}), "::1", true},
		{"tinyproxy 500, IPv4", at(&ConnectStatusError{StatusCode: 500, Status: "500 Unable to connect"}), "127.0.0.1", false},
		{"timeout, IPv6", at(&targetWaitError{alive: true, err: os.ErrDeadlineExceeded}), "::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := forAddrType(tt.f, tt.host)
			got := errors.Is(f, ErrAddrType)
			if got != tt.want {
				t.Fatalf("address-type refusal = %v, want %v (%v)", got, tt.want, f)
			}
			if got && (f.Class != health.UpstreamError || f.Stage != health.StageTargetConnect || f.Scope != health.ScopeTarget) {
				t.Errorf("refusal %s/%s scope %v, want upstream_error/target_connect scoped to the target", f.Class, f.Stage, f.Scope)
			}
			if code, ok := RefusalReplyCode(f); got && (code != 8 || !ok) {
				t.Errorf("RefusalReplyCode = %d, %v; want 8", code, ok)
			}
		})
	}
	if code, ok := RefusalReplyCode(at(&ReplyError{Code: 2})); code != 2 || !ok {
		t.Errorf("RefusalReplyCode(REP 2) = %d, %v; want 2", code, ok)
	}
	if code, ok := RefusalReplyCode(at(&ReplyError{Code: 1})); code != 1 || !ok {
		t.Errorf("RefusalReplyCode(REP 1) = %d, %v; want the upstream's own 1", code, ok)
	}
	if _, ok := RefusalReplyCode(at(&ReplyError{Code: 7})); ok {
		t.Error("RefusalReplyCode(REP 7) is a refusal of one destination")
	}
	slow := &health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte, Scope: health.ScopeTarget, Err: io.EOF}
	if _, ok := RefusalReplyCode(slow); ok {
		t.Error("RefusalReplyCode(a slow body scoped to its target) is a refusal")
	}
}

// TestCheckTarget: what no upstream may be asked for (issue: CR/LF in a
// target host went verbatim into the CONNECT request line).
func TestCheckTarget(t *testing.T) {
	for _, addr := range []string{
		"example.com:443", "EXAMPLE.com:1", "127.0.0.1:65535", "[::1]:80", "[2001:db8::1]:443",
		"under_score.example:80", "a-b.c~d:8080", strings.Repeat("a", 255) + ":80",
	} {
		if _, _, err := checkTarget(addr); err != nil {
			t.Errorf("checkTarget(%q) = %v", addr, err)
		}
	}
	for _, addr := range []string{
		"example.com", "example.com:0", "example.com:99999", "example.com:https", ":80",
		"evil.example\r\nX-Injected: 1:443", "a b.example:443", "a\x00b:443", "a\tb:443", "a\x7fb:443",
		"a/b:80", "a@b:80", "a%41:80", "a?b:80", "a#b:80", "[fe80::1%eth0]:80", "[a:b]:80", "ex\u00e4mple.com:80",
		strings.Repeat("a", 256) + ":80",
	} {
		if _, _, err := checkTarget(addr); !errors.Is(err, ErrInvalidTarget) {
			t.Errorf("checkTarget(%q) = %v, want ErrInvalidTarget", addr, err)
		}
	}
}

// TestRefusalReplyCode: only a policy refusal of one destination (REP 2,
// a 403 answering CONNECT, squid's 403 to a forwarded request) is told as
// REP 2 / 403. Every other upstream_error scoped to one host got code 2
// by default: squid's 502 ERR_TOO_BIG (the target's answer head over its
// reply_header_max_size), 503 ERR_SHUTTING_DOWN, any other tagged 5xx or
// 429 to a forwarded request reached the client as 403 "refuses this
// destination by its policy".
func TestRefusalReplyCode(t *testing.T) {
	connect := func(code int, status, tag string) *health.Failure {
		return Classify(&ConnectStatusError{StatusCode: code, Status: status, SquidError: tag}, health.StageProxyHandshake)
	}
	plain := func(code int, status, tag string) *health.Failure {
		return PlainAnswer(&ConnectStatusError{StatusCode: code, Status: status, SquidError: tag})
	}
	tests := []struct {
		name string
		f    *health.Failure
		code byte // 0: not a refusal of one destination
	}{
		{"socks rep 2", Classify(&ReplyError{Code: 2}, health.StageTargetConnect), 2},
		{"socks rep 1", Classify(&ReplyError{Code: 1}, health.StageTargetConnect), 1},
		{"socks rep 8", Classify(&ReplyError{Code: 8}, health.StageTargetConnect), 8},
		{"connect 403", connect(403, "403 Forbidden", ""), 2},
		{"connect 403 squid access denied", connect(403, "403 Forbidden", "ERR_ACCESS_DENIED 0"), 2},
		{"connect 502", connect(502, "502 Bad Gateway", ""), 0},
		{"connect 503 squid shutting down", connect(503, "503 Service Unavailable", "ERR_SHUTTING_DOWN 0"), 0},
		{"connect 429", connect(429, "429 Too Many Requests", ""), 0},
		{"plain 403 squid access denied", plain(403, "403 Forbidden", "ERR_ACCESS_DENIED 0"), 2},
		{"plain 502 squid too big", plain(502, "502 Bad Gateway", "ERR_TOO_BIG 0"), 0},
		{"plain 500 squid other", plain(500, "500 Internal Server Error", "ERR_FOO 0"), 0},
		{"plain 503 squid shutting down", plain(503, "503 Service Unavailable", "ERR_SHUTTING_DOWN 0"), 0},
		{"plain 429 squid", plain(429, "429 Too Many Requests", "ERR_FOO 0"), 0},
		{"plain 407", plain(407, "407 Proxy Authentication Required", ""), 0},
		{"plain via the attempt loop", plainAnswer(&health.Failure{Class: health.UpstreamError, Stage: health.StageHTTPStatus, Scope: health.ScopeTarget,
			Err: &ConnectStatusError{StatusCode: 502, Status: "502 Bad Gateway", SquidError: "ERR_TOO_BIG 0", Plain: true}}), 0},
		{"ipv6 through ipv4-only squid", forAddrType(connect(503, "503 Service Unavailable", "ERR_CONNECT_FAIL 101"), "::1"), 8},
		{"slow body scoped to its target", &health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte, Scope: health.ScopeTarget, Err: io.EOF}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := &AttemptsError{Attempts: []Attempt{{Upstream: "up", Failure: tt.f}}}
			code, ok := RefusalReplyCode(err)
			if code != tt.code || ok != (tt.code != 0) {
				t.Errorf("RefusalReplyCode = %d, %v; want %d, %v (%v)", code, ok, tt.code, tt.code != 0, tt.f)
			}
		})
	}
}
