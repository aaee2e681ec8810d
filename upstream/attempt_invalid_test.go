package upstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestInvalidTargetHasNoClass: a target no upstream may be asked for
// (port 0 or past 65535, no port) fails with an error wrapping
// ErrInvalidTarget that is no *health.Failure: no upstream was asked, so
// it has no class or stage (README: "— | — | no"). Issue: it was a
// target_unreachable Failure at target_connect, and the gateway logged a
// SOCKS5 CONNECT to port 0 as a target failure.
func TestInvalidTargetHasNoClass(t *testing.T) {
	fk := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	p, _ := dialPool(t, time.Second, fakeSpec("up", fk))
	for _, addr := range []string{"127.0.0.1:0", "localhost:0", "[::1]:0", "h:65536", "nohost"} {
		_, err := p.Dial(context.Background(), Request{Addr: addr})
		var f *health.Failure
		if !errors.Is(err, ErrInvalidTarget) || errors.As(err, &f) {
			t.Errorf("Dial %q: err = %v (failure %v), want ErrInvalidTarget and no Failure", addr, err, f)
		}
		_, err = p.NewAttempts(Request{Addr: addr}).Next(context.Background())
		if !errors.Is(err, ErrInvalidTarget) || errors.As(err, &f) {
			t.Errorf("Next %q: err = %v (failure %v), want ErrInvalidTarget and no Failure", addr, err, f)
		}
	}
	if n := fk.Connections(); n != 0 {
		t.Errorf("the upstream saw %d connections", n)
	}
}
