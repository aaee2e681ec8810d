package upstream

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// fakeNames is a hostCache whose resolver answers addrs and counts the
// questions, on a clock the test moves.
func fakeNames(addrs ...string) (*hostCache, *atomic.Int32, *time.Time) {
	var asked atomic.Int32
	now := time.Unix(1000, 0)
	h := newHostCache("proxy.test")
	h.now = func() time.Time { return now }
	h.resolve = func(context.Context, string) ([]netip.Addr, error) {
		asked.Add(1)
		out := make([]netip.Addr, 0, len(addrs))
		for _, a := range addrs {
			out = append(out, netip.MustParseAddr(a))
		}
		return out, nil
	}
	return h, &asked, &now
}

func dialNames(t *testing.T, h *hostCache, port uint16) error {
	t.Helper()
	c, err := dialHost(context.Background(), net.Dialer{}, h, port, 5*time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

func TestHostCache(t *testing.T) {
	port := uint16(mustPort(t, serveConns(t, func(net.Conn) {})))

	t.Run("one lookup per TTL", func(t *testing.T) {
		h, asked, now := fakeNames("127.0.0.1")
		for range 3 {
			if err := dialNames(t, h, port); err != nil {
				t.Fatal(err)
			}
		}
		if asked.Load() != 1 {
			t.Fatalf("3 dials asked DNS %d times, want 1", asked.Load())
		}
		*now = now.Add(hostCacheTTL)
		if err := dialNames(t, h, port); err != nil || asked.Load() != 2 {
			t.Fatalf("after the TTL: err %v, %d lookups, want 2", err, asked.Load())
		}
	})

	t.Run("next address when one refuses", func(t *testing.T) {
		h, asked, _ := fakeNames("127.0.0.3", "127.0.0.1") // nothing listens on 127.0.0.3
		for range 2 {
			if err := dialNames(t, h, port); err != nil {
				t.Fatal(err)
			}
		}
		if asked.Load() != 1 {
			t.Errorf("a dial that connected dropped the answer: %d lookups", asked.Load())
		}
	})

	t.Run("all refuse: asked again next time", func(t *testing.T) {
		closed := uint16(mustPort(t, upstreamtest.ClosedPort(t)))
		h, asked, _ := fakeNames("127.0.0.1")
		for i := range 2 {
			if err := dialNames(t, h, closed); !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("dial %d: %v, want refused", i, err)
			}
		}
		if asked.Load() != 2 {
			t.Errorf("%d lookups after two failed dials, want 2", asked.Load())
		}
	})

	t.Run("no address", func(t *testing.T) {
		h, _, _ := fakeNames()
		var dnsErr *net.DNSError
		if err := dialNames(t, h, port); !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Fatalf("err = %v, want a not-found DNS error", err)
		}
	})
}

// TestProxyByName: an upstream given by name is dialled through the cache
// and works (localhost resolves from /etc/hosts, nothing leaves the box);
// an IP literal bypasses it.
func TestProxyByName(t *testing.T) {
	fk := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	target := upstreamtest.NewTarget(t)
	port := fk.URL().Port()
	byName := &url.URL{Scheme: "socks5", Host: "localhost:" + port}
	d := mustDialer(t, byName, testCfg())
	if d.(*socks5Dialer).names == nil {
		t.Fatal("a proxy given by name has no address cache")
	}
	for range 2 {
		c, err := dial(t, d, target.Addr())
		if err != nil {
			t.Fatalf("through socks5://localhost:%s: %v", port, err)
		}
		roundTrip(t, c)
	}
	if mustDialer(t, fk.URL(), testCfg()).(*socks5Dialer).names != nil {
		t.Error("an IP literal proxy got an address cache")
	}
	// A name without addresses fails at stage dial (a resolver stand-in:
	// tests ask no real DNS).
	d.(*socks5Dialer).names, _, _ = fakeNames()
	_, err := dial(t, d, target.Addr())
	var f *health.Failure
	if !errors.As(err, &f) || f.Stage != health.StageDial || f.Class != health.UpstreamError {
		t.Fatalf("proxy name without addresses: %v", err)
	}
}

func mustPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
