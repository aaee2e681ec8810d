package gateway

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// Fleet tests of shared limits and sessions (issue 10): three Servers in
// one process against a private redis-server.

// shareFleet is three instances over the fakes ups (named in order), each
// upstream table extended by extra[name].
type shareFleet struct {
	redis   *clustertest.Redis
	target  *upstreamtest.Target
	ups     map[string]*upstreamtest.Server
	members []*fleetMember
}

func startShareFleet(t *testing.T, names []string, extra map[string]string, pool string) *shareFleet {
	t.Helper()
	f := &shareFleet{redis: clustertest.Start(t), target: upstreamtest.NewTarget(t), ups: map[string]*upstreamtest.Server{}}
	for _, n := range names {
		f.ups[n] = upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	}
	for _, name := range []string{"a", "b", "c"} {
		text := fmt.Sprintf(`allow_private_destinations = true
%s
[pool]
start_eligible = true
%s

[cluster]
redis = %q
instance = %q
lease_ttl = "2s"
resync = "1s"

%s
[listen]
socks5 = "127.0.0.1:0"
http = "127.0.0.1:0"
admin = "127.0.0.1:0"
`, probeConf(f.target), pool, f.redis.URL(), name, upstreamConf(names, f.ups, extra))
		srv, logs := newGateway(t, "share-"+name+".toml", text)
		if err := srv.Start(); err != nil {
			t.Fatalf("Start %s: %v", name, err)
		}
		m := &fleetMember{name: name, srv: srv, logs: logs}
		t.Cleanup(m.stop)
		f.members = append(f.members, m)
	}
	for _, m := range f.members {
		fleetWait(t, 10*time.Second, m.name+" to count 3 instances", func() bool {
			return m.srv.fleet.Connected() && m.srv.Pool().Instances() == 3
		})
		for _, n := range names {
			waitState(t, m.srv, n, health.Eligible)
		}
	}
	return f
}

// openTunnel opens a SOCKS5 tunnel to the target through front and
// leaves it open (closed by t.Cleanup unless the test closes it first).
func (f *shareFleet) openTunnel(t *testing.T, front string) (net.Conn, error) {
	t.Helper()
	d, err := proxy.SOCKS5("tcp", front, nil, &net.Dialer{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", f.target.Addr())
	if err == nil {
		t.Cleanup(func() { _ = c.Close() })
	}
	return c, err
}

func activeOn(m *fleetMember, name string) int64 { return m.srv.Pool().Lookup(name).Active() }

func TestFleetSharedMaxConns(t *testing.T) {
	f := startShareFleet(t, []string{"u1"}, map[string]string{"u1": "max_conns = 3"}, `wait_for_upstream = "300ms"`)
	a, b, c := f.members[0], f.members[1], f.members[2]

	// max_conns 3 over 3 instances: one tunnel each.
	held := map[string]net.Conn{}
	for _, m := range f.members {
		conn, err := f.openTunnel(t, m.srv.Addr("socks5"))
		if err != nil {
			t.Fatalf("first tunnel through %s: %v", m.name, err)
		}
		held[m.name] = conn
	}
	for _, m := range f.members {
		if conn, err := f.openTunnel(t, m.srv.Addr("socks5")); err == nil {
			_ = conn.Close()
			t.Fatalf("second tunnel through %s admitted: its share of max_conns 3 is 1", m.name)
		}
		if n := activeOn(m, "u1"); n != 1 {
			t.Errorf("%s: %d active tunnels on u1, want 1", m.name, n)
		}
	}
	if n := f.ups["u1"].Tunnels(); n != 3 {
		t.Errorf("u1 served %d tunnels, want 3 (one per instance)", n)
	}

	// c leaves the fleet: a and b now share max_conns 3 two ways (2 each).
	_ = held["c"].Close()
	fleetWait(t, 5*time.Second, "c's tunnel to end", func() bool { return activeOn(c, "u1") == 0 })
	c.stop()
	for _, m := range []*fleetMember{a, b} {
		fleetWait(t, 10*time.Second, m.name+" to count 2 instances", func() bool { return m.srv.Pool().Instances() == 2 })
	}
	conn, err := f.openTunnel(t, a.srv.Addr("socks5"))
	if err != nil {
		t.Fatalf("second tunnel through a after c left: %v", err)
	}
	defer conn.Close()
	if conn, err := f.openTunnel(t, a.srv.Addr("socks5")); err == nil {
		_ = conn.Close()
		t.Fatal("third tunnel through a admitted: its share of max_conns 3 over 2 instances is 2")
	}
	if n := activeOn(a, "u1") + activeOn(b, "u1"); n != 3 {
		t.Errorf("%d tunnels open on u1 across the fleet, want 3", n)
	}
}

// sessionGet sends one request with session id through m's HTTP front
// (CONNECT: a new tunnel each time) and returns the upstream's name.
func sessionGet(t *testing.T, f *shareFleet, m *fleetMember, id string) string {
	t.Helper()
	resp, err := httpGet(t, m.srv.Addr("http"), "scraper-session-"+id, "x", f.target.URL("/ok"), true)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("session %s through %s: %v %v", id, m.name, resp, err)
	}
	return resp.Header.Get("X-Rotor-Upstream")
}

// waitSession waits until m holds session id of user scraper (sessionGet's)
// bound to upstream name.
func waitSession(t *testing.T, m *fleetMember, id, name string) {
	t.Helper()
	key := m.srv.Pool().Lookup(name).Key
	fleetWait(t, 5*time.Second, m.name+" to hold session "+id+" on "+name, func() bool {
		return m.srv.Pool().SessionKey(upstream.SessionID("scraper", id)) == key
	})
}

func TestFleetSharedSession(t *testing.T) {
	names := []string{"u1", "u2", "u3"}
	f := startShareFleet(t, names, nil, `strategy = "round-robin"`)
	a, b, c := f.members[0], f.members[1], f.members[2]

	home := sessionGet(t, f, a, "fleet1")
	for _, m := range []*fleetMember{b, c} {
		waitSession(t, m, "fleet1", home)
	}
	before := tunnelCounts(f.ups)
	for i := 0; i < 3; i++ {
		for _, m := range []*fleetMember{b, c, a} {
			if got := sessionGet(t, f, m, "fleet1"); got != home {
				t.Fatalf("session bound on a to %s went to %s through %s", home, got, m.name)
			}
		}
	}
	if d := tunnelDeltas(f.ups, before); len(d) != 1 || d[home] != 9 {
		t.Errorf("session tunnels per upstream %v, want all 9 on %s", d, home)
	}

	// The home is disabled (fleet-wide): the session moves on b, and a and
	// c follow it there.
	b.srv.Tracker().Disable(b.srv.Pool().Lookup(home).Record(), "test")
	for _, m := range f.members {
		waitState(t, m.srv, home, health.Disabled)
	}
	moved := sessionGet(t, f, b, "fleet1")
	if moved == home {
		t.Fatalf("session stayed on disabled %s", home)
	}
	for _, m := range []*fleetMember{a, c} {
		waitSession(t, m, "fleet1", moved)
		if got := sessionGet(t, f, m, "fleet1"); got != moved {
			t.Errorf("session moved to %s on b went to %s through %s", moved, got, m.name)
		}
	}

	// Sessions are stored in Redis with the session TTL (10m default),
	// under the client user's name and the id.
	if v := f.redis.Do("GET", "rotor:sess:scraper-session-fleet1"); v != b.srv.Pool().Lookup(moved).Key {
		t.Errorf("stored session %q, want %s's key", v, moved)
	}
}

func TestFleetSharedSessionRedisOutage(t *testing.T) {
	names := []string{"u1", "u2", "u3"}
	f := startShareFleet(t, names, nil, `strategy = "round-robin"`)
	a, b := f.members[0], f.members[1]
	home := sessionGet(t, f, a, "before")
	waitSession(t, b, "before", home)

	f.redis.Stop()
	for _, m := range f.members {
		fleetWait(t, 5*time.Second, m.name+" notices the outage", func() bool { return !m.srv.fleet.Connected() })
	}
	// Local behaviour: known sessions stay put, new ones stick locally,
	// and the share of the limits stays the last one counted.
	for _, m := range f.members {
		if got := sessionGet(t, f, m, "before"); got != home {
			t.Errorf("during the outage session 'before' went to %s through %s, want %s", got, m.name, home)
		}
		if n := m.srv.Pool().Instances(); n != 3 {
			t.Errorf("%s: share of limits %d during the outage, want the last count 3", m.name, n)
		}
	}
	during := sessionGet(t, f, a, "during")
	for i := 0; i < 3; i++ {
		if got := sessionGet(t, f, a, "during"); got != during {
			t.Fatalf("session bound during the outage went to %s then %s through a", during, got)
		}
	}

	// Redis returns (empty): a pushes the binding it made meanwhile, and
	// b learns it.
	f.redis.Start()
	waitSession(t, b, "during", during)
	if got := sessionGet(t, f, b, "during"); got != during {
		t.Errorf("after the outage session 'during' went to %s through b, want %s", got, during)
	}
}
