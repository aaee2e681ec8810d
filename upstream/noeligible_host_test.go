package upstream

import (
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestNoEligibleHostCoolingSaysClass: the upstreams cooling for a host
// are named by their cooldown's class. Issue: two upstreams cooled for
// the host after their proxies answered 429 and 403 at HTTP status were
// told as "it refused or banned them", and the same words went to a user
// whose per-host cooldowns were auth_rejected (a wrong proxy password).
func TestNoEligibleHostCoolingSaysClass(t *testing.T) {
	tp := newTestPool(t, PoolConfig{WaitForUpstream: time.Millisecond}, nil, spec("e0", 10000), spec("e1", 10001), spec("e2", 10002))
	tp.disable(t, "e2")
	for _, n := range []string{"e0", "e1"} {
		tp.Report(tp.Lookup(n), &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: "shop.example"})
	}
	_, err := tp.NewAttempts(Request{Addr: "shop.example:443"}).Next(t.Context())
	want := "no eligible upstream for shop.example: 2 of the 3 upstreams are cooling for this host only (target_http_error ×2), the other is out: 1 disabled"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
	if err != nil && strings.Contains(err.Error(), "refused or banned") {
		t.Errorf("err = %v: a counted class is named, not guessed", err)
	}
}

// TestNoEligiblePortCoolingSaysHostPort: upstreams that cool for one
// host:port only (a policy refusal of the port: squid's
// `http_access deny CONNECT !SSL_ports`) are told as cooling for that
// host:port, not for the host: CONNECT to another port of it goes through
// them. Issue: "no eligible upstream for 127.0.0.1: 2 of the 2 upstreams
// are cooling for this host only" while CONNECT 127.0.0.1:47100 worked.
func TestNoEligiblePortCoolingSaysHostPort(t *testing.T) {
	portRefusal := &health.Failure{Class: health.UpstreamError, Stage: health.StageProxyHandshake,
		Scope: health.ScopePort, Target: "127.0.0.1:31102"}
	hostBan := &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: "127.0.0.1"}
	for _, tc := range []struct {
		name     string
		failures []*health.Failure // one per upstream
		want     string
	}{
		{"per port", []*health.Failure{portRefusal, portRefusal},
			"no eligible upstream for 127.0.0.1:31102: 2 of the 2 upstreams are cooling for this host:port only (upstream_error ×2)"},
		{"per port and per host", []*health.Failure{portRefusal, hostBan},
			"no eligible upstream for 127.0.0.1:31102: 2 of the 2 upstreams are cooling for this host or this host:port only (upstream_error ×1, target_http_error ×1)"},
		{"per host", []*health.Failure{hostBan, hostBan},
			"no eligible upstream for 127.0.0.1: 2 of the 2 upstreams are cooling for this host only (target_http_error ×2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestPool(t, PoolConfig{WaitForUpstream: time.Millisecond}, nil, spec("e0", 10000), spec("e1", 10001))
			for i, f := range tc.failures {
				f := *f
				tp.Report(tp.Lookup([]string{"e0", "e1"}[i]), &f)
			}
			_, err := tp.NewAttempts(Request{Addr: "127.0.0.1:31102"}).Next(t.Context())
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v\nwant %s", err, tc.want)
			}
		})
	}
}
