package gateway

import (
	"net"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestSOCKSLocalhostNamesThroughDirect: a SOCKS5 request for a localhost
// name in any spelling (LOCALHOST., a.localhost) through the direct
// upstream is loopback, never looked up: refused as a private destination
// (REP 2) while allow_private_destinations is off, and connected to the
// listener on 127.0.0.1 when it is on. Issue: the direct dialer asked the
// machine's DNS server for every spelling but the exact "localhost".
func TestSOCKSLocalhostNamesThroughDirect(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	names := []string{"LOCALHOST.", "localhost.", "a.localhost", "A.LocalHost."}
	direct := "[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"d1\"\n"

	closed, _ := startGateway(t, listenConf("")+direct)
	for _, name := range names {
		if rep, err := socksAsk(t, closed.Addr("socks5"), socksHello("", "", name+":"+port)); err != nil || rep != repNotAllowed {
			t.Errorf("%s with allow_private_destinations off: rep %#x err %v, want %#x", name, rep, err, repNotAllowed)
		}
	}
	if n := target.Requests(); n != 0 {
		t.Errorf("the loopback target was reached %d times with allow_private_destinations off", n)
	}
	snap := closed.Tracker().Snapshot(closed.Pool().Lookup("d1").Record())
	if len(snap.Failures) != 0 || len(snap.History) != 0 {
		t.Errorf("d1: failures %v history %+v: the client's forbidden destinations counted against it", snap.Failures, snap.History)
	}

	open, _ := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+direct)
	for _, name := range names {
		if rep := socksConnect(t, open.Addr("socks5"), name+":"+port); rep != repSuccess {
			t.Errorf("%s with allow_private_destinations on: rep %#x, want success", name, rep)
		}
	}
}
