package interop

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSignals re-checks /work/shared/UPSTREAM-SIGNALS.md against the real
// servers, with raw clients and no rotor in between: these are the signals
// rotor classifies from.
func TestSignals(t *testing.T) {
	begin(t)
	for _, k := range kinds {
		t.Run("upstream="+k.Kind, func(t *testing.T) {
			begin(t)
			t.Parallel()
			tg := newTarget(t)
			u := startUpstream(t, k.Kind, srvOpts{})
			closed := hostPort(freePort(t))
			tg.setPath(u.ExitIP, "/forbidden", behaviour{Status: 403})
			tg.setPath(u.ExitIP, "/toomany", behaviour{Status: 429})
			tg.setPath(u.ExitIP, "/hangup", behaviour{Hangup: true})
			if u.Scheme == "socks5" {
				socksSignals(t, u, tg, closed)
			} else {
				httpSignals(t, u, tg, closed)
			}
			t.Run("sigterm_to_pid_stops_all", func(t *testing.T) {
				caseT(t)
				exitErr, gone := u.p.stopLeader(5 * time.Second)
				if !gone {
					t.Errorf("SIGTERM to %s's PID left processes in its group", u.Kind)
				}
				t.Logf("%s exit: %v", u.Kind, exitErr)
			})
			t.Run("proxy_port_closed", func(t *testing.T) {
				caseT(t)
				_, err := net.DialTimeout("tcp", u.Addr, 2*time.Second)
				if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("dial stopped %s: got %v, want ECONNREFUSED", u.Kind, err)
				}
			})
		})
	}
	t.Run("upstream=dante-noauth", func(t *testing.T) {
		begin(t)
		t.Parallel()
		tg := newTarget(t)
		u := startUpstream(t, "dante", srvOpts{NoAuth: true})
		t.Run("offer_00_02_picks_00", func(t *testing.T) {
			caseT(t)
			rep, c := socksConnect(u.Addr, []byte{0, 2}, "x", "y", tg.Addr)
			if c != nil {
				c.Close()
			}
			if rep.Method != 0x00 || rep.Rep != 0 {
				t.Errorf("got method %#x rep %d (%v), want method 0x00 rep 0", rep.Method, rep.Rep, rep.Err)
			}
		})
		t.Run("offer_only_02_gets_FF", func(t *testing.T) {
			caseT(t)
			rep, c := socksConnect(u.Addr, []byte{2}, "x", "y", tg.Addr)
			if c != nil {
				c.Close()
			}
			if rep.Method != 0xFF {
				t.Errorf("got method %#x, want 0xFF", rep.Method)
			}
		})
	})
}

// getThrough sends a GET for path over an established tunnel and returns
// the response and body.
func getThrough(t *testing.T, c net.Conn, br io.Reader, host, path string) (*http.Response, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufioReader(br), nil)
	if err != nil {
		t.Fatalf("GET %s through tunnel: %v", path, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func socksSignals(t *testing.T, u *upstreamSrv, tg *target, closed string) {
	t.Run("success", func(t *testing.T) {
		caseT(t)
		rep, c := socksConnect(u.Addr, []byte{0, 2}, u.User, u.Pass, tg.Addr)
		if c == nil {
			t.Fatalf("CONNECT failed: %+v", rep)
		}
		defer c.Close()
		if rep.Method != 0x02 || rep.AuthVer != 1 || rep.Auth != 0 || rep.Rep != 0 {
			t.Errorf("got method %#x auth %d/%d rep %d, want 02, 01 00, 0", rep.Method, rep.AuthVer, rep.Auth, rep.Rep)
		}
		wantBind := map[string]string{"dante": u.ExitIP, "microsocks": "0.0.0.0"}[u.Kind]
		if host, _, _ := net.SplitHostPort(rep.BindAddr); host != wantBind {
			t.Errorf("BND.ADDR = %s, want host %s", rep.BindAddr, wantBind)
		}
		if u.Kind == "microsocks" && rep.BindAddr != "0.0.0.0:0" {
			t.Errorf("microsocks BND = %s, want 0.0.0.0:0", rep.BindAddr)
		}
		resp, body := getThrough(t, c, c, tg.Addr, "/")
		if resp.StatusCode != 200 || !strings.Contains(body, okBody(u.ExitIP)) {
			t.Errorf("through tunnel: %s %q, want 200 %q", resp.Status, body, okBody(u.ExitIP))
		}
	})
	t.Run("wrong_password", func(t *testing.T) {
		caseT(t)
		start := time.Now()
		rep, c := socksConnect(u.Addr, []byte{0, 2}, u.User, wrongPass, tg.Addr)
		if c != nil {
			c.Close()
		}
		want := map[string]int{"dante": 1, "microsocks": 2}[u.Kind]
		if rep.Method != 0x02 || rep.AuthVer != 1 || rep.Auth != want {
			t.Errorf("got method %#x auth %d/%d, want 02 and 01 %02d", rep.Method, rep.AuthVer, rep.Auth, want)
		}
		if !errors.Is(rep.Err, io.EOF) && !errors.Is(rep.Err, syscall.ECONNRESET) {
			t.Errorf("after rejection: got %v, want the server to close", rep.Err)
		}
		t.Logf("%s rejected the password in %v", u.Kind, time.Since(start).Round(time.Millisecond))
	})
	t.Run("no_credentials", func(t *testing.T) {
		caseT(t)
		rep, c := socksConnect(u.Addr, []byte{0}, "", "", tg.Addr)
		if c != nil {
			c.Close()
		}
		if rep.Method != 0xFF {
			t.Errorf("offering only 00: got method %#x, want 0xFF", rep.Method)
		}
	})
	t.Run("target_closed", func(t *testing.T) {
		caseT(t)
		start := time.Now()
		rep, c := socksConnect(u.Addr, []byte{0, 2}, u.User, u.Pass, closed)
		if c != nil {
			c.Close()
		}
		if rep.Rep != 5 {
			t.Errorf("CONNECT to closed port: got REP %d (%v), want 5", rep.Rep, rep.Err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("REP took %v, want immediate", d)
		}
	})
	t.Run("target_hangup", func(t *testing.T) {
		caseT(t)
		rep, c := socksConnect(u.Addr, []byte{0, 2}, u.User, u.Pass, tg.Addr)
		if c == nil {
			t.Fatalf("CONNECT failed: %+v", rep)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET /hangup HTTP/1.1\r\nHost: %s\r\n\r\n", tg.Addr)
		n, err := io.Copy(io.Discard, c)
		if n != 0 || err != nil {
			t.Errorf("target hangs up: read %d bytes, err %v; want EOF with no bytes", n, err)
		}
	})
}

func httpSignals(t *testing.T, u *upstreamSrv, tg *target, closed string) {
	auth := basicAuth("Proxy-Authorization", u.User, u.Pass)
	wrong := basicAuth("Proxy-Authorization", u.User, wrongPass)
	connectLine := func(addr, auth string) string {
		return fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", addr, addr, auth)
	}
	getLine := func(addr, path, auth string) string {
		return fmt.Sprintf("GET http://%s%s HTTP/1.1\r\nHost: %s\r\n%sConnection: close\r\n\r\n", addr, path, addr, auth)
	}
	wantProto := map[string]string{"squid": "HTTP/1.1", "tinyproxy": "HTTP/1.0"}[u.Kind]

	t.Run("connect_ok", func(t *testing.T) {
		caseT(t)
		res := proxyRequest(t, u.Addr, "CONNECT", connectLine(tg.Addr, auth))
		if res.Resp.StatusCode != 200 || res.Resp.Proto != wantProto {
			t.Fatalf("CONNECT: got %s %s, want %s 200", res.Resp.Proto, res.Resp.Status, wantProto)
		}
		resp, body := getThrough(t, res.Conn, res.BR, tg.Addr, "/")
		if resp.StatusCode != 200 || !strings.Contains(body, okBody(u.ExitIP)) {
			t.Errorf("through tunnel: %s %q, want 200 %q", resp.Status, body, okBody(u.ExitIP))
		}
	})
	t.Run("forward_ok", func(t *testing.T) {
		caseT(t)
		res := proxyRequest(t, u.Addr, "GET", getLine(tg.Addr, "/", auth))
		if res.Resp.StatusCode != 200 || !strings.Contains(res.Body, okBody(u.ExitIP)) {
			t.Errorf("forward GET: %s %q, want 200 %q", res.Resp.Status, res.Body, okBody(u.ExitIP))
		}
		if u.Kind == "squid" {
			for _, h := range []string{"Via", "X-Cache"} {
				if res.Resp.Header.Get(h) == "" {
					t.Errorf("squid forward: no %s header (headers %v)", h, res.Resp.Header)
				}
			}
		}
	})
	for _, method := range []string{"CONNECT", "GET"} {
		raw := connectLine(tg.Addr, wrong)
		if method == "GET" {
			raw = getLine(tg.Addr, "/", wrong)
		}
		t.Run("wrong_password/"+method, func(t *testing.T) {
			caseT(t)
			res := proxyRequest(t, u.Addr, method, raw)
			h := res.Resp.Header
			switch u.Kind {
			case "squid":
				if res.Resp.StatusCode != 407 || !strings.HasPrefix(h.Get("Proxy-Authenticate"), "Basic") ||
					!strings.HasPrefix(h.Get("X-Squid-Error"), "ERR_CACHE_ACCESS_DENIED") {
					t.Errorf("got %s Proxy-Authenticate %q X-Squid-Error %q; want 407 Basic ERR_CACHE_ACCESS_DENIED",
						res.Resp.Status, h.Get("Proxy-Authenticate"), h.Get("X-Squid-Error"))
				}
				if method == "CONNECT" {
					// The connection stays open: a second request on it is answered.
					_ = res.Conn.SetDeadline(time.Now().Add(5 * time.Second))
					io.WriteString(res.Conn, connectLine(tg.Addr, auth))
					resp, err := http.ReadResponse(res.BR, &http.Request{Method: "CONNECT"})
					if err != nil {
						t.Errorf("second CONNECT on the same connection after 407: %v", err)
					} else if resp.StatusCode != 200 {
						t.Errorf("second CONNECT on the same connection: %s, want 200", resp.Status)
					}
				}
			case "tinyproxy":
				if res.Resp.StatusCode != 401 || h.Get("WWW-Authenticate") == "" ||
					!strings.EqualFold(h.Get("Connection"), "close") {
					t.Errorf("got %s WWW-Authenticate %q Connection %q; want 401, a challenge, close",
						res.Resp.Status, h.Get("WWW-Authenticate"), h.Get("Connection"))
				}
			}
		})
	}
	// A target's own 407 relayed, next to the proxy's own 407 to a
	// forwarded GET without credentials (wrong ones: wrong_password/GET):
	// what tells them apart (gateway own407). The proxy's own is marked
	// (squid: X-Squid-Error; tinyproxy: Server, and no Via); the relayed
	// one carries the proxy's Via, no mark, and no Proxy-Authenticate
	// (both drop the target's as hop-by-hop).
	viaMark := map[string]string{"squid": "(squid/", "tinyproxy": "(tinyproxy/"}[u.Kind]
	t.Run("target_407_relayed", func(t *testing.T) {
		caseT(t)
		res := proxyRequest(t, u.Addr, "GET", getLine(tg.Addr, target407Path, auth))
		h := res.Resp.Header
		t.Logf("%s %s headers %v", res.Resp.Proto, res.Resp.Status, h)
		if res.Resp.StatusCode != 407 || h.Get("X-Squid-Error") != "" || strings.HasPrefix(h.Get("Server"), "tinyproxy") ||
			h.Get("Proxy-Authenticate") != "" || !strings.Contains(h.Get("Via"), viaMark) {
			t.Errorf("got %s X-Squid-Error %q Server %q Proxy-Authenticate %q Via %q; want 407 relayed with the proxy's Via and no mark of its own",
				res.Resp.Status, h.Get("X-Squid-Error"), h.Get("Server"), h.Get("Proxy-Authenticate"), h.Get("Via"))
		}
	})
	t.Run("own_407_no_credentials/GET", func(t *testing.T) {
		caseT(t)
		res := proxyRequest(t, u.Addr, "GET", getLine(tg.Addr, "/", ""))
		h := res.Resp.Header
		t.Logf("%s %s headers %v", res.Resp.Proto, res.Resp.Status, h)
		marked := strings.HasPrefix(h.Get("X-Squid-Error"), "ERR_CACHE_ACCESS_DENIED")
		if u.Kind == "tinyproxy" {
			marked = strings.HasPrefix(h.Get("Server"), "tinyproxy/") && h.Get("Via") == ""
		}
		if res.Resp.StatusCode != 407 || !marked || !strings.HasPrefix(h.Get("Proxy-Authenticate"), "Basic") {
			t.Errorf("got %s headers %v; want 407 Basic, marked as the proxy's own", res.Resp.Status, h)
		}
	})
	t.Run("no_credentials", func(t *testing.T) {
		caseT(t)
		res := proxyRequest(t, u.Addr, "CONNECT", connectLine(tg.Addr, ""))
		if res.Resp.StatusCode != 407 {
			t.Errorf("CONNECT without credentials: %s, want 407", res.Resp.Status)
		}
	})
	for _, method := range []string{"CONNECT", "GET"} {
		raw := connectLine(closed, auth)
		if method == "GET" {
			raw = getLine(closed, "/", auth)
		}
		t.Run("target_closed/"+method, func(t *testing.T) {
			caseT(t)
			res := proxyRequest(t, u.Addr, method, raw)
			h := res.Resp.Header
			switch u.Kind {
			case "squid":
				if res.Resp.StatusCode != 503 || !strings.HasPrefix(h.Get("X-Squid-Error"), "ERR_CONNECT_FAIL 111") {
					t.Errorf("got %s X-Squid-Error %q; want 503 ERR_CONNECT_FAIL 111", res.Resp.Status, h.Get("X-Squid-Error"))
				}
			case "tinyproxy":
				if res.Resp.StatusCode != 500 || !strings.Contains(res.Resp.Status, "Unable to connect") {
					t.Errorf("got %q; want 500 Unable to connect", res.Resp.Status)
				}
			}
		})
	}
	for _, st := range []struct {
		path string
		code int
	}{{"/forbidden", 403}, {"/toomany", 429}} {
		t.Run(fmt.Sprintf("target_%d_relayed", st.code), func(t *testing.T) {
			caseT(t)
			res := proxyRequest(t, u.Addr, "GET", getLine(tg.Addr, st.path, auth))
			if res.Resp.StatusCode != st.code {
				t.Errorf("got %s, want %d relayed", res.Resp.Status, st.code)
			}
			if e := res.Resp.Header.Get("X-Squid-Error"); e != "" {
				t.Errorf("relayed target status carries X-Squid-Error %q", e)
			}
		})
	}
	t.Run("target_hangup", func(t *testing.T) {
		caseT(t)
		before := tg.count(u.ExitIP, "/hangup")
		c, err := net.DialTimeout("tcp", u.Addr, 3*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, getLine(tg.Addr, "/hangup", auth))
		resp, err := http.ReadResponse(bufioReader(c), nil)
		seen := tg.count(u.ExitIP, "/hangup") - before
		switch u.Kind {
		case "squid":
			if err != nil {
				t.Fatalf("squid: %v, want 502", err)
			}
			if resp.StatusCode != 502 || !strings.HasPrefix(resp.Header.Get("X-Squid-Error"), "ERR_ZERO_SIZE_OBJECT") {
				t.Errorf("got %s X-Squid-Error %q; want 502 ERR_ZERO_SIZE_OBJECT", resp.Status, resp.Header.Get("X-Squid-Error"))
			}
		case "tinyproxy":
			if err == nil {
				t.Errorf("tinyproxy answered %s; want a close with no bytes", resp.Status)
			}
		}
		t.Logf("%s: target saw %d request(s) for /hangup", u.Kind, seen)
	})
}
