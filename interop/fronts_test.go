package interop

import (
	"fmt"
	"strings"
	"testing"
)

// TestClientsDirect drives each real client straight at the real upstreams,
// without rotor: it proves the client drivers and the servers work, so a
// failure in TestFronts points at rotor.
func TestClientsDirect(t *testing.T) {
	begin(t)
	for _, k := range kinds {
		t.Run("upstream="+k.Kind, func(t *testing.T) {
			begin(t)
			t.Parallel()
			tg := newTarget(t)
			u := startUpstream(t, k.Kind, srvOpts{})
			for _, c := range clients {
				if !c.Auth || (u.Scheme == "socks5") != (c.Front == frontSOCKS) {
					continue
				}
				t.Run(fmt.Sprintf("front=%s/client=%s", c.Front, c.Name), func(t *testing.T) {
					caseT(t)
					checkFetch(t, c, tg, u.Addr, u.User, u.Pass, u.ExitIP)
				})
			}
		})
	}
	// Chromium cannot send proxy credentials from the command line: use
	// instances without auth.
	for _, kind := range []string{"microsocks", "tinyproxy"} {
		t.Run("upstream="+kind+"-noauth", func(t *testing.T) {
			begin(t)
			t.Parallel()
			tg := newTarget(t)
			u := startUpstream(t, kind, srvOpts{NoAuth: true})
			for _, c := range clients {
				if c.Name != "chromium" || (u.Scheme == "socks5") != (c.Front == frontSOCKS) {
					continue
				}
				t.Run(fmt.Sprintf("front=%s/client=%s", c.Front, c.Name), func(t *testing.T) {
					caseT(t)
					checkFetch(t, c, tg, u.Addr, "", "", u.ExitIP)
				})
			}
		})
	}
}

// TestFronts: every rotor front × every real upstream reaches the target,
// driven by real clients. One rotor per upstream kind, configured with just
// that upstream, so the exit address seen by the target proves the path.
func TestFronts(t *testing.T) {
	begin(t)
	for _, k := range kinds {
		t.Run("upstream="+k.Kind, func(t *testing.T) {
			begin(t)
			t.Parallel()
			tg := newTarget(t)
			u := startUpstream(t, k.Kind, srvOpts{})
			r := startRotor(t, rotorOpts{
				Upstreams: []rotorUpstream{{Name: k.Kind, URL: u.URL(u.Pass)}},
				ProbeURL:  tg.URL + probePath,
			})
			for _, c := range clients {
				t.Run(fmt.Sprintf("front=%s/client=%s", c.Front, c.Name), func(t *testing.T) {
					caseT(t)
					t.Cleanup(func() {
						if t.Failed() {
							t.Logf("record after the failure: %s", r.upstream(t, k.Kind))
						}
					})
					addr := r.SOCKS
					if c.Front != frontSOCKS {
						addr = r.HTTP
					}
					checkFetch(t, c, tg, addr, "", "", u.ExitIP)
				})
			}
			// rotor names the upstream that served the request.
			t.Run("front=http/header=X-Rotor-Upstream", func(t *testing.T) {
				caseT(t)
				res := proxyRequest(t, r.HTTP, "GET",
					fmt.Sprintf("GET %s/hdr HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tg.URL, tg.Addr))
				if res.Resp.StatusCode != 200 || !strings.Contains(res.Body, okBody(u.ExitIP)) {
					t.Errorf("GET through http front: %s %q", res.Resp.Status, res.Body)
				}
				if got := res.Resp.Header.Get("X-Rotor-Upstream"); got != k.Kind {
					t.Errorf("X-Rotor-Upstream = %q, want %q", got, k.Kind)
				}
			})
			t.Run("front=connect/header=X-Rotor-Upstream", func(t *testing.T) {
				caseT(t)
				res := proxyRequest(t, r.HTTP, "CONNECT",
					fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tg.Addr, tg.Addr))
				if res.Resp.StatusCode != 200 {
					t.Fatalf("CONNECT through http front: %s", res.Resp.Status)
				}
				if got := res.Resp.Header.Get("X-Rotor-Upstream"); got != k.Kind {
					t.Errorf("X-Rotor-Upstream = %q, want %q", got, k.Kind)
				}
				resp, body := getThrough(t, res.Conn, res.BR, tg.Addr, "/hdr")
				if resp.StatusCode != 200 || !strings.Contains(body, okBody(u.ExitIP)) {
					t.Errorf("through tunnel: %s %q", resp.Status, body)
				}
			})
			t.Run("api/record", func(t *testing.T) {
				caseT(t)
				rec := r.upstream(t, k.Kind)
				if rec.State != "eligible" {
					t.Errorf("state = %q, want eligible: %s", rec.State, rec)
				}
				if strings.Contains(rec.URL, u.Pass) {
					t.Errorf("url %q contains the password", rec.URL)
				}
				if rec.Successes == 0 {
					t.Errorf("successes = 0 after the clients' requests: %s", rec)
				}
			})
		})
	}
}
