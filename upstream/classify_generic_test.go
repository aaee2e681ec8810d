package upstream

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestClassifyGenericGatewayError: a 502 or 503 to CONNECT from a generic
// http proxy (no X-Squid-Error) most often means it could not reach the
// target: upstream_error at target_connect for that host only (Scope
// target). It cooled the upstream whole, so one client's typo emptied
// that upstream for everyone. squid's other errors and other 5xx stay
// unscoped; 504 stays target_timeout.
func TestClassifyGenericGatewayError(t *testing.T) {
	for _, tt := range []struct {
		name  string
		ce    *ConnectStatusError
		class health.Class
		scope health.Scope
	}{
		{"502", &ConnectStatusError{StatusCode: 502, Status: "502 Bad Gateway"}, health.UpstreamError, health.ScopeTarget},
		{"503", &ConnectStatusError{StatusCode: 503, Status: "503 Service Unavailable"}, health.UpstreamError, health.ScopeTarget},
		{"504", &ConnectStatusError{StatusCode: 504, Status: "504 Gateway Timeout"}, health.TargetTimeout, health.ScopeDefault},
		{"500", &ConnectStatusError{StatusCode: 500, Status: "500 Internal Server Error"}, health.UpstreamError, health.ScopeDefault},
		{"squid 503 ERR_SHUTTING_DOWN", &ConnectStatusError{StatusCode: 503, Status: "503 Service Unavailable", SquidError: "ERR_SHUTTING_DOWN 0"}, health.UpstreamError, health.ScopeDefault},
		{"squid 502 ERR_FOO", &ConnectStatusError{StatusCode: 502, Status: "502 Bad Gateway", SquidError: "ERR_FOO"}, health.UpstreamError, health.ScopeDefault},
		{"plain 502", &ConnectStatusError{StatusCode: 502, Status: "502 Bad Gateway", Plain: true}, health.UpstreamError, health.ScopeDefault},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := Classify(tt.ce, health.StageProxyHandshake)
			if f.Class != tt.class || f.Scope != tt.scope {
				t.Errorf("got %s scope %v at %s, want %s scope %v", f.Class, f.Scope, f.Stage, tt.class, tt.scope)
			}
			if f.Class == health.UpstreamError && tt.ce.StatusCode >= 500 && f.Stage != health.StageTargetConnect {
				t.Errorf("stage %s, want target_connect", f.Stage)
			}
		})
	}
}

// TestDialGenericGatewayErrorScoped: an http upstream answering 502 to
// CONNECT no-such-host.invalid:443 cools for that host only, and the next
// upstream is tried; one that answers so for hosts other upstreams reach
// still cools entirely (the target-failure rule).
func TestDialGenericGatewayErrorScoped(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	gen := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: http.StatusBadGateway}})
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, tr := dialPool(t, time.Second, fakeSpec("gen", gen, "alone"), fakeSpec("good", good, "good"))
	ctx := context.Background()

	if l, err := p.Dial(ctx, Request{Addr: "no-such-host.invalid:" + port, Tags: []string{"alone"}}); err == nil {
		l.Conn.Close()
		l.Done()
		t.Fatal("gen connected")
	}
	s := snapshot(t, p, tr, "gen")
	if s.State != health.Eligible || len(s.Targets) != 1 || s.Targets[0].Host != "no-such-host.invalid" || s.Targets[0].Reason != health.UpstreamError {
		t.Fatalf("gen: %v %v/%v targets %+v, want eligible and cooling for no-such-host.invalid only", s.State, s.Reason, s.Stage, s.Targets)
	}

	// Hosts that good reaches after gen failed them: gen's own fault
	// (weighed at gen's next failure).
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
	if s := snapshot(t, p, tr, "gen"); s.State != health.Cooling || s.Reason != health.UpstreamError {
		t.Fatalf("an upstream answering 502 for host:ports others reach: %v %v, want cooling upstream_error", s.State, s.Reason)
	}
}
