package gateway

import (
	"net"
	"net/http"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestDirectForbiddenIsClientRefusal: with allow_private_destinations off,
// the direct upstream's refusal of a loopback or unspecified destination
// is the client's doing: SOCKS reply 2, HTTP 403 X-Rotor-Error forbidden,
// a line at info, no failure counted against the upstream. Issue: each
// was target_unreachable "reported by upstream direct" (502 / REP 4),
// counted in its failures and logged at warn, one write per request, so
// a hostile client could fill the log.
func TestDirectForbiddenIsClientRefusal(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	srv, logs := startGateway(t, listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"d1\"\n")
	addrs := []string{target.Addr(), "0.0.0.0:" + port, "[::]:" + port, "[::ffff:127.0.0.1]:" + port, "localhost:" + port}
	for _, addr := range addrs {
		if rep, err := socksAsk(t, srv.Addr("socks5"), socksHello("", "", addr)); err != nil || rep != repNotAllowed {
			t.Errorf("SOCKS CONNECT %s: rep %#x err %v, want %#x", addr, rep, err, repNotAllowed)
		}
		resp, err := httpAsk(t, srv.Addr("http"), string(connectHello(addr)))
		if err != nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Rotor-Error") != "forbidden" {
			t.Errorf("HTTP CONNECT %s: %s err %v, want 403 forbidden", addr, statusOf(resp), err)
		}
		resp, err = httpAsk(t, srv.Addr("http"), "GET http://"+addr+"/ok HTTP/1.1\r\nHost: "+addr+"\r\nConnection: close\r\n\r\n")
		if err != nil || resp.StatusCode != http.StatusForbidden || resp.Header.Get("X-Rotor-Error") != "forbidden" {
			t.Errorf("GET http://%s/: %s err %v, want 403 forbidden", addr, statusOf(resp), err)
		}
	}
	if n := target.Requests(); n != 0 {
		t.Errorf("the loopback target was reached %d times", n)
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("d1").Record())
	if len(snap.Failures) != 0 || len(snap.History) != 0 {
		t.Errorf("d1: failures %v history %+v: the client's forbidden destinations counted against it", snap.Failures, snap.History)
	}
	infoSummaryLines(t, logs, 3*len(addrs))
}
