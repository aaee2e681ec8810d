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
