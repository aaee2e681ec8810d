package gateway

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestFleetStalePasswordCoolsOnlyItsInstance: instance b still has u1's
// old password; its clients' tunnels meet auth_rejected and b cools u1,
// but a, with the right password (the same identity: scheme, host, port,
// user), keeps serving through it. Bug: b's failure cooled u1 on the
// whole fleet.
func TestFleetStalePasswordCoolsOnlyItsInstance(t *testing.T) {
	rd := clustertest.Start(t)
	target := upstreamtest.NewTarget(t)
	u1 := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Username: "user", Password: "right-pass"})
	u2 := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	start := func(name, pw string) *Server {
		u := u1.URL()
		u.User = url.UserPassword("user", pw)
		text := fmt.Sprintf(`allow_private_destinations = true
[probe]
url = %q
expect_status = [200]

[cluster]
redis = %q
instance = %q

[[upstream]]
url = %q
name = "u1"

[[upstream]]
url = %q
name = "u2"

[listen]
socks5 = "127.0.0.1:0"
http = "127.0.0.1:0"
admin = "127.0.0.1:0"
`, target.URL("/ok"), rd.URL(), name, u.String(), u2.URL().String())
		srv, _ := newGateway(t, "fleet-"+name+".toml", text)
		if err := srv.Start(); err != nil {
			t.Fatalf("Start %s: %v", name, err)
		}
		m := &fleetMember{name: name, srv: srv}
		t.Cleanup(m.stop)
		fleetWait(t, 10*time.Second, name+" connected to redis", func() bool { return srv.fleet.Connected() })
		return srv
	}
	// b starts once u1 is eligible on a (its probe passed): b takes that
	// record from the fleet without probing with its old password.
	a := start("a", "right-pass")
	waitState(t, a, "u1", health.Eligible)
	b := start("b", "old-pass")
	waitState(t, b, "u1", health.Eligible)

	for i := 0; stateOf(b, "u1").State != health.Cooling; i++ {
		if i == 20 {
			t.Fatalf("u1 did not cool on b: %v", stateOf(b, "u1").State)
		}
		resp, err := socksGet(t, b.Addr("socks5"), "", "", target.URL("/ok"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request through b: %v %v", resp, err)
		}
	}
	if snap := stateOf(b, "u1"); snap.Reason != health.AuthRejected {
		t.Fatalf("b: u1 cooled for %v, want auth_rejected", snap.Reason)
	}
	// a lists b's failure in the shared history, and keeps u1 eligible.
	fleetWait(t, 3*time.Second, "a lists b's failure", func() bool {
		for _, h := range stateOf(a, "u1").History {
			if h.Reason == health.AuthRejected && strings.Contains(h.Detail, "(instance b)") {
				return true
			}
		}
		return false
	})
	if s := stateOf(a, "u1").State; s != health.Eligible {
		t.Errorf("a: u1 %v, want eligible (its password is right)", s)
	}
	if v := rd.Do("GET", "rotor:rec:"+a.Pool().Lookup("u1").Record().Key()); strings.Contains(v, "right-pass") || strings.Contains(v, "old-pass") {
		t.Errorf("the shared record holds a password: %s", v)
	}
}
