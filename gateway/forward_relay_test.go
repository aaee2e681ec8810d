package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestForwardTargetRotorHeadersRemoved: X-Rotor-* fields in a target's
// answer are rotor's vocabulary, not the target's: a site must not make a
// scraper believe rotor failed (X-Rotor-Error) or name another upstream.
// They are removed from forwarded answers, on the lean client (GET) and
// the Transport (POST) alike; X-Rotor-Upstream is rotor's own, once.
func TestForwardTargetRotorHeadersRemoved(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\n"+
		"X-Rotor-Error: refused; stage=dial; upstream=evil\r\n"+
		"X-Rotor-Upstream: evil\r\n"+
		"x-rotor-whatever: 1\r\n"+
		"X-Rotorless: kept\r\n"+
		"Content-Length: 3\r\n\r\nok\n"))
	srv := directGateway(t)
	for _, method := range forwardMethods {
		t.Run(method, func(t *testing.T) {
			resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
			if err != nil || resp.StatusCode != 200 || body != "ok\n" {
				t.Fatalf("got %s %q %v, want 200 ok", statusOf(resp), body, err)
			}
			for k, v := range resp.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-rotor-") && k != "X-Rotor-Upstream" {
					t.Errorf("target's %s: %q reached the client", k, v)
				}
			}
			if got := resp.Header.Values("X-Rotor-Upstream"); len(got) != 1 || got[0] != "up" {
				t.Errorf("X-Rotor-Upstream = %q, want [up]", got)
			}
			if got := resp.Header.Get("X-Rotorless"); got != "kept" {
				t.Errorf("X-Rotorless = %q, want kept (only the X-Rotor- prefix is rotor's)", got)
			}
		})
	}
	noFailures(t, srv, "up")
}

// TestForwardClientGoneMidBody: a client that leaves while a large answer
// is relayed (it read 1 KiB, then closed or reset its connection) is
// outcome client_gone, in the log line and in rotor_tunnels_total, not
// ok; the upstream connection is closed, not pooled with the rest of the
// body unread, and the upstream is not blamed.
func TestForwardClientGoneMidBody(t *testing.T) {
	const size = 64 << 20 // far more than the socket buffers hold
	for _, tc := range []struct {
		name   string
		method string
		reset  bool
	}{
		{"GET close", http.MethodGet, false},
		{"GET reset", http.MethodGet, true},
		{"POST close", http.MethodPost, false},
		{"POST reset", http.MethodPost, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ended := make(chan struct{})
			rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
				defer close(ended)
				if _, err := rt.readHead(br); err != nil {
					return
				}
				if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size); err != nil {
					return
				}
				chunk := make([]byte, 32<<10)
				for sent := 0; sent < size; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return // rotor closed the upstream connection
					}
				}
			})
			srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
				"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
			c, err := net.Dial("tcp", srv.Addr("http"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cl := ""
			if tc.method == http.MethodPost {
				cl = "Content-Length: 0\r\n"
			}
			fmt.Fprintf(c, "%s http://%s/big HTTP/1.1\r\nHost: %s\r\n%s\r\n", tc.method, rt.Addr(), rt.Addr(), cl)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, &http.Request{Method: tc.method})
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("answer: %v %v", statusOf(resp), err)
			}
			if _, err := io.ReadFull(resp.Body, make([]byte, 1024)); err != nil {
				t.Fatal(err)
			}
			if tc.reset {
				_ = c.(*net.TCPConn).SetLinger(0)
			}
			c.Close()

			line := forwardLineWithin(t, logs, 30*time.Second)
			if !strings.Contains(line, `"outcome":"client_gone"`) {
				t.Errorf("log line %s, want outcome client_gone", line)
			}
			exp := scrapeMetrics(t, srv)
			if want := `rotor_tunnels_total{front="http_forward",outcome="client_gone"} 1`; !strings.Contains(exp, want+"\n") {
				t.Errorf("metrics lack %s", want)
			}
			for l := range strings.SplitSeq(exp, "\n") {
				if strings.HasPrefix(l, `rotor_tunnels_total{front="http_forward",outcome="ok"} `) && !strings.HasSuffix(l, " 0") {
					t.Errorf("metrics count the request as ok: %s", l)
				}
			}
			select {
			case <-ended:
			case <-time.After(30 * time.Second):
				t.Fatal("upstream connection still open 30s after the client left")
			}
			srv.transports.Range(func(k, v any) bool {
				if fc, ok := v.(*fwdClient); ok {
					fc.mu.Lock()
					n := fc.nidle
					fc.mu.Unlock()
					if n != 0 {
						t.Errorf("%d idle upstream connections pooled, want 0 (the body was not read to its end)", n)
					}
				}
				return true
			})
			noFailures(t, srv, "up")
		})
	}
}

// scrapeMetrics returns the admin front's /metrics exposition.
func scrapeMetrics(t *testing.T, srv *Server) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + srv.Addr("admin") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %s %v", resp.Status, err)
	}
	return string(b)
}

// forwardLineWithin waits up to d for the log line of the forwarded
// request and returns it.
func forwardLineWithin(t *testing.T, logs *logBuffer, d time.Duration) string {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, `"request forwarded"`) {
				return l
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request log line within %v:\n%s", d, logs.String())
		}
	}
}

// TestForwardProxyAnswerDetail: an http:// upstream's own answer to a
// forwarded plain request (tinyproxy's 401, a 407) is described as the
// answer to the forwarded request, not to a CONNECT rotor never sent: in
// the client's 502, the log line and the upstream's history.
func TestForwardProxyAnswerDetail(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
	}{
		{"tinyproxy 401", "HTTP/1.1 401 Unauthorized\r\nServer: tinyproxy/1.11.1\r\nContent-Length: 0\r\n\r\n"},
		{"407", "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\nContent-Length: 0\r\n\r\n"},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+" "+method, func(t *testing.T) {
				proxy := newRawTarget(t, serveAnswers(false, tc.answer))
				srv, logs := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\n"+
					"[[upstream]]\nurl = \"http://rotor:up-pw@%s\"\nname = \"tp\"\n", proxy.Addr()))
				resp, body, err := askForward(t, srv, method, "http://example.test/")
				if err != nil || resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("got %s %v, want 502", statusOf(resp), err)
				}
				if strings.Contains(body, "CONNECT") {
					t.Errorf("502 body %q names CONNECT", body)
				}
				snap := srv.Tracker().Snapshot(srv.Pool().Lookup("tp").Record())
				// Any of these fields can be a target's, relayed: the
				// upstream cools for that host only.
				if snap.State != health.Eligible || len(snap.Targets) != 1 || snap.Targets[0].Host != "example.test" || snap.Targets[0].Reason != health.AuthRejected {
					t.Errorf("state %v targets %+v, want eligible, auth_rejected for example.test only", snap.State, snap.Targets)
				}
				if h := snap.History[len(snap.History)-1]; !strings.Contains(h.Detail, "proxy answered the forwarded request with") || strings.Contains(h.Detail, "CONNECT") {
					t.Errorf("history detail %q, want the forwarded request, not CONNECT", h.Detail)
				}
				for _, h := range snap.History {
					if strings.Contains(h.Detail, "CONNECT") {
						t.Errorf("history detail %q names CONNECT", h.Detail)
					}
				}
				line := forwardLineWithin(t, logs, 10*time.Second)
				if strings.Contains(line, "CONNECT") || !strings.Contains(line, "proxy answered the forwarded request with") {
					t.Errorf("log line %s, want the forwarded request, not CONNECT", line)
				}
				if strings.Contains(logs.String(), "up-pw") {
					t.Error("the upstream's password is in the log")
				}
			})
		}
	}
}
