package interop

import (
	"strings"
	"testing"
	"time"
)

// TestPipeline runs pipeline = true (greeting, credentials and CONNECT in
// one write) against the real SOCKS5 servers: dante answers each step in
// turn, with and without credentials, so rotor's probe passes and clients
// are served through it; microsocks drops what follows the greeting, so
// the handshake times out and the record says why.
func TestPipeline(t *testing.T) {
	begin(t)
	for _, auth := range []bool{true, false} {
		name := "dante/auth"
		if !auth {
			name = "dante/no-auth"
		}
		t.Run(name, func(t *testing.T) {
			caseT(t)
			t.Parallel()
			tg := newTarget(t)
			u := startUpstream(t, "dante", srvOpts{NoAuth: !auth})
			r := startRotor(t, rotorOpts{
				Upstreams: []rotorUpstream{{Name: "dante", URL: u.URL(u.Pass), Pipeline: true}},
				ProbeURL:  tg.URL + probePath,
			}) // waits until the pipelined probe has passed
			for _, c := range clients[:1] { // curl through the SOCKS5 front
				checkFetch(t, c, tg, r.SOCKS, "", "", u.ExitIP)
			}
			res := proxyRequest(t, r.HTTP, "CONNECT", "CONNECT "+tg.Addr+" HTTP/1.1\r\nHost: "+tg.Addr+"\r\n\r\n")
			if res.Resp.StatusCode != 200 {
				t.Fatalf("CONNECT through the http front: %s", res.Resp.Status)
			}
			if resp, body := getThrough(t, res.Conn, res.BR, tg.Addr, "/pipelined"); resp.StatusCode != 200 || !strings.Contains(body, okBody(u.ExitIP)) {
				t.Errorf("through the tunnel: %s %q", resp.Status, body)
			}
		})
	}
	t.Run("microsocks", func(t *testing.T) {
		caseT(t)
		t.Parallel()
		tg := newTarget(t)
		u := startUpstream(t, "microsocks", srvOpts{})
		r := startRotor(t, rotorOpts{
			Upstreams: []rotorUpstream{{Name: "microsocks", URL: u.URL(u.Pass), Pipeline: true}},
			ProbeURL:  tg.URL + probePath,
			NoWait:    true,
		})
		rec := r.waitRecord(t, "microsocks", 30*time.Second, "cooling after a pipelined probe", func(rec record) bool {
			return rec.State == "cooling"
		})
		if rec.Reason != "timeout" || !strings.Contains(rec.History[len(rec.History)-1].Detail, "may not accept pipeline = true") {
			t.Errorf("record %s; want reason timeout and a detail naming pipeline", rec)
		}
	})
}
