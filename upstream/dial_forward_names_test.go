package upstream

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestEndpointDialForwardUsesNameCache: plain-HTTP forwarding to an
// http:// upstream given by name dialled the name with a fresh
// net.Dialer (one DNS question per connection; tunnels and probes use
// the once-a-minute cache). Endpoint.DialForward, which the gateway now
// dials through, goes through the endpoint's name cache.
func TestEndpointDialForwardUsesNameCache(t *testing.T) {
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	_, port, _ := net.SplitHostPort(up.Addr())
	p := newTestPool(t, PoolConfig{}, nil, Spec{Name: "named", URL: &url.URL{Scheme: "http", Host: "proxy.test:" + port}})
	e := p.Lookup("named")
	if e == nil || !e.AbsoluteForm() {
		t.Fatalf("endpoint %v takes no absolute form", e)
	}
	var asked atomic.Int32
	e.dialer.(*connectDialer).names.resolve = func(context.Context, string) ([]netip.Addr, error) {
		asked.Add(1)
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	for i := range 3 {
		c, _, ok, err := e.DialForward(t.Context())
		if err != nil || !ok {
			t.Fatalf("dial %d: %v %v", i, ok, err)
		}
		c.Close()
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("%d DNS questions for 3 dials, want 1", n)
	}
	if e.Latency() == 0 {
		t.Error("a forward dial fed no latency sample")
	}
}
