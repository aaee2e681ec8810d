package upstream

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestAttemptsErrorText: the text of an AttemptsError counts the attempts
// only when there were several, and a failure of no class reads as its
// stage and cause. Issue: a client refused by the direct upstream's
// policy read "all 1 attempts failed; upstream direct: target_connect:
// none: dial tcp …", "none" being no class anyone knows.
func TestAttemptsErrorText(t *testing.T) {
	refused := &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("connection refused")}
	forbidden := &health.Failure{Class: health.ClassNone, Stage: health.StageTargetConnect, Err: errors.New("destination forbidden by policy")}
	for _, tc := range []struct {
		attempts []Attempt
		want     string
	}{
		{[]Attempt{{"a", refused}}, "upstream a: dial: refused: connection refused"},
		{[]Attempt{{"direct", forbidden}}, "upstream direct: target_connect: destination forbidden by policy"},
		{[]Attempt{{"a", refused}, {"b", forbidden}}, "all 2 attempts failed; upstream a: dial: refused: connection refused; upstream b: target_connect: destination forbidden by policy"},
		{nil, "all 0 attempts failed"},
	} {
		if got := (&AttemptsError{Attempts: tc.attempts}).Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// TestDirectNoClassText: the direct dialer's failures of no class (a
// forbidden destination, a cancelled dial) are still Failures to
// errors.As, but their text has no "none" (the probe's detail read
// "target_connect: none: dial tcp …").
func TestDirectNoClassText(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	cfg := testCfg()
	cfg.AllowPrivate = false
	_, err := dial(t, mustDialer(t, mustURL(t, "direct://"), cfg), target.Addr())
	wantFailure(t, err, health.ClassNone, health.StageTargetConnect)
	if !errors.Is(err, ErrDestinationForbidden) || strings.Contains(err.Error(), "none") || !strings.HasPrefix(err.Error(), "target_connect: dial tcp ") {
		t.Errorf("forbidden: %q", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = mustDialer(t, mustURL(t, "direct://"), testCfg()).DialContext(ctx, "tcp", target.Addr())
	wantFailure(t, err, health.ClassNone, health.StageTargetConnect)
	if !IsCanceled(err) || strings.Contains(err.Error(), "none") {
		t.Errorf("cancelled: %q", err)
	}
	// A class is still there when there is one.
	_, err = dial(t, mustDialer(t, mustURL(t, "direct://"), testCfg()), upstreamtest.ClosedPort(t))
	if f := wantFailure(t, err, health.TargetUnreachable, health.StageTargetConnect); err.Error() != f.Error() {
		t.Errorf("a classified failure's text %q, want the Failure's %q", err, f)
	}
}
