package upstream

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestNoEligibleSaysWhyOut: an expired wait says, in one line, why the
// upstreams are out (cooling by class, disabled) and when the next one is
// due, and never a failure's detail. Issue: the client got "no eligible
// upstream" and nothing else, whatever the pool was doing.
func TestNoEligibleSaysWhyOut(t *testing.T) {
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, specs("a", "b", "c")...)
	const secret = "hunter2-canary"
	tp.tr.Fail(tp.Lookup("a").Record(), &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("refused " + secret)})
	tp.tr.Fail(tp.Lookup("b").Record(), &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth, Err: errors.New("407 " + secret)})
	tp.disable(t, "c")
	_, err := tp.NewAttempts(Request{Addr: "example.com:443"}).Next(context.Background())
	if !errors.Is(err, ErrNoEligible) {
		t.Fatalf("Next: %v, want ErrNoEligible", err)
	}
	got := err.Error()
	want := regexp.MustCompile(`^no eligible upstream: 2 cooling \(refused ×1, auth_rejected ×1\), 1 disabled; next one due in [1-9][0-9]*s$`)
	if !want.MatchString(got) {
		t.Errorf("text %q\nwant it to match %s", got, want)
	}
	if strings.Contains(got, secret) || strings.Contains(got, "\n") {
		t.Errorf("text %q holds a failure's detail or a line break", got)
	}
}

// TestNoEligibleOutTexts pins the texts with upstreams out.
func TestNoEligibleOutTexts(t *testing.T) {
	refused := []ClassCount{{health.Refused, 1}}
	tests := []struct {
		ne   NoEligibleError
		want string
	}{
		{NoEligibleError{Matching: 1, Cooling: refused, NextDue: 24*time.Second + time.Millisecond},
			"no eligible upstream: the only upstream is cooling (refused); due in 25s"},
		{NoEligibleError{Matching: 1, Probing: 1}, "no eligible upstream: the only upstream is awaiting a probe"},
		{NoEligibleError{Matching: 1, Disabled: 1, Tags: []string{"us"}}, `no eligible upstream: the only upstream with tags "us" is disabled`},
		{NoEligibleError{Matching: 3, Cooling: []ClassCount{{health.Timeout, 2}}, Probing: 1, NextDue: 3 * time.Second, ProbeTargetDown: 2},
			"no eligible upstream: 2 cooling (timeout ×2), 1 awaiting a probe; the probe target seems down; next one due in 3s"},
		{NoEligibleError{Matching: 2, Tags: []string{"us"}, Cooling: []ClassCount{{health.Refused, 2}}, NextDue: time.Second},
			`no eligible upstream: none of the 2 upstreams with tags "us" is eligible: 2 cooling (refused ×2); next one due in 1s`},
		{NoEligibleError{Matching: 3, AtMaxConns: 1, Cooling: refused, Disabled: 1, NextDue: time.Minute},
			"no eligible upstream: 1 of the 3 upstreams is eligible but at its max_conns, the rest are out: 1 cooling (refused ×1), 1 disabled; next one due in 1m0s"},
	}
	for _, tc := range tests {
		if got := tc.ne.Error(); got != tc.want {
			t.Errorf("%+v:\n got %q\nwant %q", tc.ne, got, tc.want)
		}
	}
}
