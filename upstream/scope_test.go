package upstream

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestDialPolicyRefusalPerPort: an upstream's policy refusal of one port
// (stock squid's 403 ERR_ACCESS_DENIED to CONNECT outside SSL_ports, a
// SOCKS5 server's reply 2) cools it for that host:port only: the host's
// ports it allows still go through it. Issue: with squid as the only
// upstream, CONNECT 127.0.0.1:46101 (refused) made CONNECT 127.0.0.1:46103,
// which squid allows, fail 503 unavailable for the whole cooldown. A
// general failure (reply 1) stays scoped to the host.
func TestDialPolicyRefusalPerPort(t *testing.T) {
	denied := upstreamtest.Mode{Fault: upstreamtest.Reply, Code: http.StatusForbidden,
		Header: http.Header{"X-Squid-Error": {"ERR_ACCESS_DENIED 0"}}}
	tests := []struct {
		name    string
		fake    func(t *testing.T) *upstreamtest.Server
		refusal upstreamtest.Mode
		code    byte // RefusalReplyCode of the refusal
		perPort bool
	}{
		{"squid 403 ERR_ACCESS_DENIED", func(t *testing.T) *upstreamtest.Server {
			return upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
		}, denied, 2, true},
		{"socks5 reply 2", func(t *testing.T) *upstreamtest.Server {
			return upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
		}, upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 2}, 2, true},
		{"socks5 reply 1 stays per host", func(t *testing.T) *upstreamtest.Server {
			return upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
		}, upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 1}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := upstreamtest.NewTarget(t) // 127.0.0.1:<allowed>
			refused := upstreamtest.ClosedPort(t)
			fk := tt.fake(t)
			p, tr := dialPool(t, 5*time.Second, fakeSpec("only", fk))
			ctx := context.Background()

			fk.SetMode(tt.refusal)
			_, err := p.Dial(ctx, Request{Addr: refused})
			if code, ok := RefusalReplyCode(err); !ok || code != tt.code {
				t.Fatalf("refusal of %s: %v; RefusalReplyCode %d %v, want %d", refused, err, code, ok, tt.code)
			}
			s := snapshot(t, p, tr, "only")
			want := refused
			if !tt.perPort {
				want = "127.0.0.1"
			}
			if s.State != health.Eligible || len(s.Targets) != 1 || s.Targets[0].Host != want {
				t.Fatalf("after the refusal: %v, targets %+v; want eligible, cooling for %s only", s.State, s.Targets, want)
			}

			fk.SetMode(upstreamtest.Mode{})
			l, err := p.Dial(ctx, Request{Addr: target.Addr()})
			if !tt.perPort {
				var ne *NoEligibleError
				if !errors.As(err, &ne) || ne.HostCooling != 1 {
					t.Fatalf("another port of a host refused with reply 1: %v, want no eligible upstream, cooling for the host", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s, a port the upstream allows, after a refusal of %s: %v", target.Addr(), refused, err)
			}
			l.Conn.Close()
			l.Done()
			if _, err := p.Dial(ctx, Request{Addr: refused}); !errors.Is(err, ErrNoEligible) {
				t.Errorf("the refused %s again: %v, want no eligible upstream (cooling for it)", refused, err)
			}
			if n := fk.Tunnels(); n != 1 {
				t.Errorf("%d tunnels through the upstream, want 1", n)
			}
		})
	}
}
