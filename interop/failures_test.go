package interop

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// TestFailures: with each real upstream, each way it fails is classified as
// CONTRACT.md says, asserted through /api/upstreams.
func TestFailures(t *testing.T) {
	begin(t)
	for _, k := range kinds {
		t.Run("upstream="+k.Kind, func(t *testing.T) {
			begin(t)
			t.Parallel()
			u := startUpstream(t, k.Kind, srvOpts{})
			// start makes a target and a rotor in front of u (with pass as
			// the configured password) for one case.
			start := func(t *testing.T, pass string) (*target, *rotor) {
				t.Helper()
				tg := newTarget(t)
				r := startRotor(t, rotorOpts{
					Upstreams: []rotorUpstream{{Name: k.Kind, URL: u.URL(pass)}},
					ProbeURL:  tg.URL + probePath,
				})
				return tg, r
			}

			// With the default start (probe_allowed until a probe passes)
			// the probe meets the wrong password first.
			t.Run("wrong_password_at_start/auth_rejected", func(t *testing.T) {
				caseT(t)
				tg := newTarget(t)
				r := startRotor(t, rotorOpts{
					Upstreams: []rotorUpstream{{Name: k.Kind, URL: u.URL(wrongPass)}},
					ProbeURL:  tg.URL + probePath,
					NoWait:    true,
				})
				rec := r.waitRecord(t, k.Kind, 5*time.Second, "auth_rejected", func(rec record) bool {
					return cooledFor(rec, "auth_rejected", "")
				})
				if rec.State == "eligible" {
					t.Errorf("state = eligible with a wrong password: %s", rec)
				}
				t.Logf("stage %q", rec.Stage)
			})

			// A client's request meets the wrong password: the upstream starts
			// eligible (pool.start_eligible) so the client path classifies it.
			t.Run("wrong_password/front=socks5/auth_rejected", func(t *testing.T) {
				caseT(t)
				tg := newTarget(t)
				r := startRotor(t, rotorOpts{
					Upstreams: []rotorUpstream{{Name: k.Kind, URL: u.URL(wrongPass)}},
					// No probe URL: nothing but the client meets the upstream.
					PoolExtra: "start_eligible = true\n",
					NoWait:    true,
				})
				rep, c := socksConnect(r.SOCKS, []byte{0}, "", "", tg.Addr)
				if c != nil {
					c.Close()
					t.Errorf("CONNECT through an upstream with a wrong password succeeded")
				}
				t.Logf("client saw SOCKS reply %d (%v)", rep.Rep, rep.Err)
				rec := r.waitRecord(t, k.Kind, 5*time.Second, "auth_rejected at proxy_auth", func(rec record) bool {
					return cooledFor(rec, "auth_rejected", "proxy_auth")
				})
				if rec.State == "eligible" {
					t.Errorf("state = eligible after auth_rejected: %s", rec)
				}
			})

			// The same through the plain HTTP front: tinyproxy answers a
			// forwarded GET with 401 (not 407), which must still read as the
			// proxy rejecting rotor, not as the target's 401.
			t.Run("wrong_password/front=http/auth_rejected", func(t *testing.T) {
				caseT(t)
				tg := newTarget(t)
				r := startRotor(t, rotorOpts{
					Upstreams: []rotorUpstream{{Name: k.Kind, URL: u.URL(wrongPass)}},
					PoolExtra: "start_eligible = true\n",
					NoWait:    true,
				})
				res := proxyRequest(t, r.HTTP, "GET",
					fmt.Sprintf("GET %s/auth HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tg.URL, tg.Addr))
				t.Logf("client saw %s X-Rotor-Error %q", res.Resp.Status, res.Resp.Header.Get("X-Rotor-Error"))
				if res.Resp.StatusCode == 200 {
					t.Errorf("GET through an upstream with a wrong password succeeded")
				}
				r.waitRecord(t, k.Kind, 5*time.Second, "auth_rejected at proxy_auth", func(rec record) bool {
					return cooledFor(rec, "auth_rejected", "proxy_auth")
				})
			})

			t.Run("upstream_killed/refused", func(t *testing.T) {
				caseT(t)
				own := startUpstream(t, k.Kind, srvOpts{})
				tg := newTarget(t)
				r := startRotor(t, rotorOpts{
					Upstreams: []rotorUpstream{{Name: k.Kind, URL: own.URL(own.Pass)}},
					ProbeURL:  tg.URL + probePath,
				})
				own.kill()
				rep, c := socksConnect(r.SOCKS, []byte{0}, "", "", tg.Addr)
				if c != nil {
					c.Close()
					t.Errorf("CONNECT through a killed upstream succeeded")
				}
				t.Logf("client saw SOCKS reply %d (%v)", rep.Rep, rep.Err)
				r.waitRecord(t, k.Kind, 5*time.Second, "refused at dial", func(rec record) bool {
					return cooledFor(rec, "refused", "dial")
				})
			})

			t.Run("target_closed/front=socks5", func(t *testing.T) {
				caseT(t)
				_, r := start(t, u.Pass)
				closed := hostPort(freePort(t))
				rep, c := socksConnect(r.SOCKS, []byte{0}, "", "", closed)
				if c != nil {
					c.Close()
					t.Fatalf("CONNECT to a closed target port succeeded")
				}
				// dante and microsocks say REP 5 themselves; squid's 503
				// ERR_CONNECT_FAIL 111 and tinyproxy's 500 are target failures
				// too and must come back as one (3, 4 or 5), not as 1.
				t.Logf("client saw SOCKS reply %d", rep.Rep)
				switch {
				case u.Scheme == "socks5" && rep.Rep != 5:
					t.Errorf("SOCKS reply = %d (%v), want 5 (connection refused, relayed)", rep.Rep, rep.Err)
				case u.Scheme == "http" && (rep.Rep < 3 || rep.Rep > 5):
					t.Errorf("SOCKS reply = %d (%v), want a target failure (3, 4 or 5)", rep.Rep, rep.Err)
				}
				assertNotCooled(t, r, k.Kind)
			})

			t.Run("target_closed/front=connect", func(t *testing.T) {
				caseT(t)
				_, r := start(t, u.Pass)
				closed := hostPort(freePort(t))
				res := proxyRequest(t, r.HTTP, "CONNECT",
					fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", closed, closed))
				code := res.Resp.StatusCode
				if code != 502 && code != 503 && code != 504 {
					t.Errorf("CONNECT to a closed target port: %s, want 502/503/504", res.Resp.Status)
				}
				if res.Resp.Header.Get("X-Rotor-Error") == "" {
					t.Errorf("no X-Rotor-Error on the failure (headers %v)", res.Resp.Header)
				}
				t.Logf("client saw %s X-Rotor-Error %q", res.Resp.Status, res.Resp.Header.Get("X-Rotor-Error"))
				assertNotCooled(t, r, k.Kind)
			})

			t.Run("target_closed/front=http", func(t *testing.T) {
				caseT(t)
				_, r := start(t, u.Pass)
				closed := hostPort(freePort(t))
				res := proxyRequest(t, r.HTTP, "GET",
					fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", closed, closed))
				code := res.Resp.StatusCode
				if code != 502 && code != 503 && code != 504 {
					t.Errorf("GET to a closed target port: %s, want 502/503/504", res.Resp.Status)
				}
				if res.Resp.Header.Get("X-Rotor-Error") == "" {
					t.Errorf("no X-Rotor-Error on the failure (headers %v)", res.Resp.Header)
				}
				t.Logf("client saw %s X-Rotor-Error %q", res.Resp.Status, res.Resp.Header.Get("X-Rotor-Error"))
				assertNotCooled(t, r, k.Kind)
			})

			for _, code := range []int{403, 429} {
				t.Run(fmt.Sprintf("target_status=%d/target_http_error", code), func(t *testing.T) {
					caseT(t)
					tg, r := start(t, u.Pass)
					tg.set(u.ExitIP, behaviour{Status: code})
					res := proxyRequest(t, r.HTTP, "GET",
						fmt.Sprintf("GET %s/banned HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tg.URL, tg.Addr))
					t.Logf("client saw %s", res.Resp.Status)
					if tg.count(u.ExitIP, "/banned") == 0 {
						t.Errorf("the request never reached the target from %s (counts %s)", u.ExitIP, tg.counts())
					}
					r.waitRecord(t, k.Kind, 5*time.Second, "target_http_error at http_status", func(rec record) bool {
						return cooledFor(rec, "target_http_error", "http_status")
					})
				})
			}

			for _, c := range []struct {
				name, stage string
				b           behaviour
			}{
				{"target_stalls_mid_body", "body", behaviour{Stall: true}},
				{"target_sends_nothing", "first_byte", behaviour{Hold: true}},
			} {
				t.Run(c.name+"/slow_body", func(t *testing.T) {
					caseT(t)
					tg, r := start(t, u.Pass)
					tg.set(u.ExitIP, c.b)
					conn, err := net.DialTimeout("tcp", r.HTTP, 3*time.Second)
					if err != nil {
						t.Fatal(err)
					}
					defer conn.Close()
					_ = conn.SetDeadline(time.Now().Add(8 * time.Second))
					fmt.Fprintf(conn, "GET %s/slow HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tg.URL, tg.Addr)
					began := time.Now()
					n, err := io.Copy(io.Discard, conn)
					t.Logf("client read %d bytes in %v (%v)", n, time.Since(began).Round(time.Millisecond), err)
					if time.Since(began) > 7*time.Second {
						t.Errorf("rotor never cut the stalled response (slow_body first_byte=1s stall=1s)")
					}
					r.waitRecord(t, k.Kind, 5*time.Second, "slow_body at "+c.stage, func(rec record) bool {
						return cooledFor(rec, "slow_body", c.stage)
					})
				})
			}
		})
	}
}

// assertNotCooled checks that a target failure behind a healthy upstream left
// the upstream eligible and never cooled it.
func assertNotCooled(t *testing.T, r *rotor, name string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // let a (wrong) classification land
	rec := r.upstream(t, name)
	if rec.State != "eligible" || everCooled(rec) {
		t.Errorf("target failure cooled the upstream: %s", rec)
	}
	for class, n := range rec.Failures {
		if n > 0 && !strings.HasPrefix(class, "target_unreachable") && !strings.HasPrefix(class, "target_timeout") {
			t.Errorf("target failure counted as %s against the upstream: %s", class, rec)
		}
	}
}
