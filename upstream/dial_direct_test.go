package upstream

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

func TestDirectSuccess(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	for _, addr := range []string{target.Addr(), "localhost:" + port} {
		c, err := dial(t, mustDialer(t, mustURL(t, "direct://"), testCfg()), addr)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		if _, ok := c.(*net.TCPConn); !ok {
			t.Fatalf("conn is %T, want *net.TCPConn", c)
		}
		roundTrip(t, c)
	}
}

func TestDirectFailures(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	closed := upstreamtest.ClosedPort(t)
	d := mustDialer(t, mustURL(t, "direct://"), testCfg())

	_, err := dial(t, d, closed)
	if f := wantFailure(t, err, health.TargetUnreachable, health.StageTargetConnect); f.Target != "127.0.0.1" {
		t.Fatalf("Target = %q", f.Target)
	}

	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = d.DialContext(ctx, "tcp", target.Addr())
	wantFailure(t, err, health.TargetTimeout, health.StageTargetConnect)

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	_, err = d.DialContext(ctx, "tcp", target.Addr())
	wantFailure(t, err, health.ClassNone, health.StageTargetConnect)
	if !IsCanceled(err) {
		t.Fatalf("err = %v, want IsCanceled", err)
	}

	// DNS errors are classified from the error type; tests never resolve
	// names other than localhost (no queries leave the box).
	dnsErr := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "x.example", IsNotFound: true}}
	if got := directClass(dnsErr); got != health.TargetUnreachable {
		t.Fatalf("DNS not found: %s", got)
	}
	if got := directClass(&net.DNSError{Err: "timeout", IsTimeout: true}); got != health.TargetTimeout {
		t.Fatalf("DNS timeout: %s", got)
	}
	if got := directClass(errors.New("too many open files")); got != health.UpstreamError {
		t.Fatalf("local error: %s", got)
	}
}

// TestDirectPolicy: without AllowPrivate, loopback targets are refused by
// policy after resolution, as the client's fault (no class, ClientFault).
func TestDirectPolicy(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	cfg := testCfg()
	cfg.AllowPrivate = false
	d := mustDialer(t, mustURL(t, "direct://"), cfg)
	for _, addr := range []string{target.Addr(), "localhost:" + port, "[::1]:" + port} {
		_, err := dial(t, d, addr)
		wantFailure(t, err, health.ClassNone, health.StageTargetConnect)
		if !errors.Is(err, ErrDestinationForbidden) || !ClientFault(err) {
			t.Fatalf("%s: err = %v, want ErrDestinationForbidden", addr, err)
		}
	}
	if n := target.Requests(); n != 0 {
		t.Fatalf("target saw %d requests", n)
	}
}

// TestDirectForbidSeesResolvedAddress: DialConfig.Forbid judges the
// address a name resolved to, even with AllowPrivate (the gateway refuses
// its own listeners so, whatever name points at them), before anything is
// sent; other ports are not affected.
func TestDirectForbidSeesResolvedAddress(t *testing.T) {
	guarded := upstreamtest.NewTarget(t)
	other := upstreamtest.NewTarget(t)
	_, gport, _ := net.SplitHostPort(guarded.Addr())
	_, oport, _ := net.SplitHostPort(other.Addr())
	var asked []netip.AddrPort
	cfg := testCfg()
	cfg.Forbid = func(ap netip.AddrPort) error {
		asked = append(asked, ap)
		if ap.Addr().IsLoopback() && ap.Port() == netip.MustParseAddrPort(guarded.Addr()).Port() {
			return errors.New("rotor's own listener")
		}
		return nil
	}
	d := mustDialer(t, mustURL(t, "direct://"), cfg)
	for _, addr := range []string{guarded.Addr(), "localhost:" + gport} {
		_, err := dial(t, d, addr)
		wantFailure(t, err, health.ClassNone, health.StageTargetConnect)
		if !errors.Is(err, ErrDestinationForbidden) || !ClientFault(err) {
			t.Fatalf("%s: err = %v, want ErrDestinationForbidden", addr, err)
		}
	}
	if n := guarded.Requests(); n != 0 {
		t.Fatalf("the guarded target saw %d requests", n)
	}
	c, err := dial(t, d, "localhost:"+oport)
	if err != nil {
		t.Fatalf("another port: %v", err)
	}
	c.Close()
	for _, ap := range asked {
		if !ap.Addr().IsLoopback() || ap.Addr().Is4In6() {
			t.Errorf("Forbid was asked about %v, want resolved, unmapped loopback addresses", ap)
		}
	}
}

func TestForbiddenAddr(t *testing.T) {
	tests := map[string]bool{
		"127.0.0.1": true, "127.9.9.9": true, "::1": true,
		"10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "fd00::1": true,
		"169.254.169.254": true, "fe80::1": true, "100.64.0.1": true,
		"0.0.0.0": true, "::": true, "224.0.0.1": true, "ff02::1": true,
		"::ffff:127.0.0.1": true,
		"8.8.8.8":          false, "1.1.1.1": false, "2606:4700::1111": false, "100.128.0.1": false,
	}
	for s, want := range tests {
		ip := netip.MustParseAddr(s)
		if got := forbiddenAddr(ip.Unmap()); got != want {
			t.Errorf("forbiddenAddr(%s) = %v, want %v", s, got, want)
		}
		err := checkDestination(netip.AddrPortFrom(ip, 80).String(), true, nil)
		if got := errors.Is(err, ErrDestinationForbidden); got != want {
			t.Errorf("checkDestination(%s) = %v, want forbidden=%v", s, err, want)
		}
	}
	if !errors.Is(checkDestination("garbage", true, nil), ErrDestinationForbidden) {
		t.Error("unparsable address allowed")
	}
}
