package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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
	// Policy refusals of one destination are scoped to it.
	policy := map[string]bool{"rep 2": true, "403": true, "squid access denied": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Classify(tt.err, tt.stage)
			if f == nil || f.Class != tt.class || f.Stage != tt.want {
				t.Fatalf("Classify = %+v, want %s/%s", f, tt.class, tt.want)
			}
			if got := f.Scope == health.ScopeTarget; got != policy[tt.name] {
				t.Fatalf("Classify scope = %v, want target scope %v", f.Scope, policy[tt.name])
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
		{"squid dns", &ConnectStatusError{StatusCode: 503, SquidError: "ERR_DNS_FAIL 0"}, 4, true},
		{"tinyproxy", &ConnectStatusError{StatusCode: 500, Status: "500 Unable to connect"}, 5, true},
		{"504", &ConnectStatusError{StatusCode: 504, Status: "504 Gateway Timeout"}, 6, true},
		{"407", &ConnectStatusError{StatusCode: 407}, 0, false},
		{"direct refused", fail(health.TargetUnreachable, sysErr(syscall.ECONNREFUSED)), 5, true},
		{"direct net unreachable", fail(health.TargetUnreachable, sysErr(syscall.ENETUNREACH)), 3, true},
		{"direct timeout", fail(health.TargetTimeout, context.DeadlineExceeded), 6, true},
		{"direct forbidden", fail(health.TargetUnreachable, fmt.Errorf("%w: x", ErrDestinationForbidden)), 2, true},
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
