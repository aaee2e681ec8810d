package upstream

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// lookupRecorder is a resolver whose every DNS exchange is recorded and
// refused: a lookup is seen, and no query leaves the machine.
type lookupRecorder struct {
	mu      sync.Mutex
	queries int
}

func (l *lookupRecorder) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		l.mu.Lock()
		l.queries++
		l.mu.Unlock()
		return nil, errors.New("test resolver: no DNS here")
	}}
}

func (l *lookupRecorder) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queries
}

// TestDirectLocalhostNamesNeverReachDNS: names RFC 6761 reserves for
// loopback ("localhost" and names under it, any case, with or without the
// root dot) are loopback to the direct dialer without a lookup: with
// private destinations allowed they reach a listener on 127.0.0.1, and
// without, they are refused by policy (the client's, no class) before any
// connect. Issue: Go's resolver matches only the exact "localhost" of
// /etc/hosts, so "LOCALHOST." or "a.localhost" was asked of the machine's
// DNS server.
func TestDirectLocalhostNamesNeverReachDNS(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	names := []string{"localhost", "LOCALHOST.", "Localhost", "localhost.", "a.localhost", "A.B.LocalHost."}

	rec := &lookupRecorder{}
	var asked []netip.AddrPort
	cfg := testCfg()
	cfg.Forbid = func(ap netip.AddrPort) error { asked = append(asked, ap); return nil }
	d := &directDialer{cfg: cfg, resolver: rec.resolver()}
	for _, name := range names {
		c, err := dial(t, d, net.JoinHostPort(name, port))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if got := c.RemoteAddr().String(); got != target.Addr() {
			t.Errorf("%s: connected to %s, want %s", name, got, target.Addr())
		}
		roundTrip(t, c)
	}
	if n := rec.count(); n != 0 {
		t.Errorf("%d DNS exchanges for localhost names, want none", n)
	}
	if len(asked) != len(names) || len(asked) > 0 && asked[0].String() != target.Addr() {
		t.Errorf("Forbid was asked about %v, want %s once per name", asked, target.Addr())
	}

	before := target.Requests()
	cfg.AllowPrivate, cfg.Forbid = false, nil
	d = &directDialer{cfg: cfg, resolver: rec.resolver()}
	for _, name := range names {
		_, err := dial(t, d, net.JoinHostPort(name, port))
		f := wantFailure(t, err, health.ClassNone, health.StageTargetConnect)
		if !errors.Is(err, ErrDestinationForbidden) || !ClientFault(err) {
			t.Errorf("%s with private destinations off: %v, want ErrDestinationForbidden", name, err)
		}
		if f.Target != name {
			t.Errorf("%s: Failure.Target %q", name, f.Target)
		}
	}
	if n := rec.count(); n != 0 {
		t.Errorf("%d DNS exchanges for localhost names with private destinations off, want none", n)
	}
	if n := target.Requests() - before; n != 0 {
		t.Errorf("the loopback target saw %d requests with private destinations off", n)
	}

	// The recorder does see lookups: a name that only looks like
	// localhost goes to it (and is refused there, sending nothing).
	d = &directDialer{cfg: testCfg(), resolver: rec.resolver()}
	for _, name := range []string{"notlocalhost", "localhost.example"} {
		if _, err := dial(t, d, net.JoinHostPort(name, port)); err == nil {
			t.Errorf("%s: connected through a resolver that refuses every query", name)
		}
	}
	if rec.count() == 0 {
		t.Error("the recorder saw no lookup for names that are not localhost")
	}
}

// TestDirectLocalhostNetworks: tcp4 and tcp6 keep a localhost name to
// their family, and a closed port is the target's (target_unreachable),
// as for an address.
func TestDirectLocalhostNetworks(t *testing.T) {
	if got := loopbackAddrs("tcp4"); len(got) != 1 || got[0] != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("tcp4: %v", got)
	}
	if got := loopbackAddrs("tcp6"); len(got) != 1 || got[0] != netip.IPv6Loopback() {
		t.Errorf("tcp6: %v", got)
	}
	closed := upstreamtest.ClosedPort(t)
	_, port, _ := net.SplitHostPort(closed)
	rec := &lookupRecorder{}
	d := &directDialer{cfg: testCfg(), resolver: rec.resolver()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := d.DialContext(ctx, "tcp4", "LocalHost.:"+port)
	wantFailure(t, err, health.TargetUnreachable, health.StageTargetConnect)
	if rec.count() != 0 {
		t.Error("a lookup for a localhost name")
	}
	for name, want := range map[string]bool{
		"localhost": true, "LOCALHOST.": true, "x.localhost": true, "x.y.LOCALHOST": true,
		"notlocalhost": false, "localhost.example": false, "localhostx": false, "": false, "127.0.0.1": false,
	} {
		if got := localhostName(name); got != want {
			t.Errorf("localhostName(%s) = %v, want %v", strconv.Quote(name), got, want)
		}
	}
}
