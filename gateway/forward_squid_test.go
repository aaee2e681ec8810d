package gateway

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// squidGateway starts a gateway whose one upstream, "squid", is a raw
// http:// proxy answering every forwarded request with answer.
func squidGateway(t *testing.T, answer string) *Server {
	t.Helper()
	proxy := newRawTarget(t, serveAnswers(false, answer))
	srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\n"+
		"[target_http_error]\nstatuses = []\n[[upstream]]\nurl = \"http://%s\"\nname = \"squid\"\n", proxy.Addr()))
	return srv
}

// TestForwardSquidErrorIsNoPolicyRefusal: squid's own error answers to a
// forwarded request that are neither a request error nor a policy
// refusal (502 ERR_TOO_BIG for a target's answer head over
// reply_header_max_size, 500/503/429 with any other tag) were told to
// the client as 403 "upstream squid refuses this destination by its
// policy": RefusalReplyCode made every upstream_error scoped to one host
// a code 2. They are a 502 that says what squid answered; the upstream
// cools for that host only, as before.
func TestForwardSquidErrorIsNoPolicyRefusal(t *testing.T) {
	for _, tc := range []struct{ status, tag string }{
		{"502 Bad Gateway", "ERR_TOO_BIG 0"},
		{"500 Internal Server Error", "ERR_FOO 0"},
		{"503 Service Unavailable", "ERR_SHUTTING_DOWN 0"},
		{"429 Too Many Requests", "ERR_FOO 0"},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.status+" "+tc.tag+"/"+method, func(t *testing.T) {
				srv := squidGateway(t, "HTTP/1.1 "+tc.status+"\r\nX-Squid-Error: "+tc.tag+"\r\nContent-Length: 0\r\n\r\n")
				resp, body, err := askForward(t, srv, method, "http://example.test/")
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusBadGateway {
					t.Errorf("client got %d, want 502 (%q)", resp.StatusCode, body)
				}
				if got, want := resp.Header.Get("X-Rotor-Error"), "upstream_error; stage=http_status; upstream=squid"; got != want {
					t.Errorf("X-Rotor-Error %q, want %q", got, want)
				}
				if strings.Contains(body, "policy") || !strings.Contains(body, tc.tag) || !strings.Contains(body, tc.status) {
					t.Errorf("body %q: want what squid answered (%s, %s), no policy refusal", body, tc.status, tc.tag)
				}
				snap := srv.Tracker().Snapshot(srv.Pool().Lookup("squid").Record())
				if snap.State != health.Eligible || len(snap.Targets) != 1 || snap.Targets[0].Reason != health.UpstreamError {
					t.Errorf("squid: %v targets %+v, want eligible, upstream_error for the host only", snap.State, snap.Targets)
				}
			})
		}
	}
	// A real policy refusal stays one (403 / REP 2).
	for _, method := range forwardMethods {
		srv := squidGateway(t, "HTTP/1.1 403 Forbidden\r\nX-Squid-Error: ERR_ACCESS_DENIED 0\r\nContent-Length: 0\r\n\r\n")
		resp, body, err := askForward(t, srv, method, "http://example.test/")
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "policy") || !strings.Contains(body, "ERR_ACCESS_DENIED") {
			t.Errorf("%s: ERR_ACCESS_DENIED got %d %q, want 403 naming the policy refusal and squid's tag", method, resp.StatusCode, body)
		}
	}
}

// TestForwardSquidTagOnSuccessIsRelayed: squid tags only its error
// pages; a successful answer carrying X-Squid-Error is the target's (any
// site can send any header). It was taken for squid's own error: the
// client got a 403 instead of the 200 and the upstream cooled for the
// host. A redirect (squid's deny_info sends one with X-Squid-Error too)
// is relayed as well: it is an answer the client can follow.
func TestForwardSquidTagOnSuccessIsRelayed(t *testing.T) {
	for _, answer := range []string{
		"HTTP/1.1 200 OK\r\nX-Squid-Error: ERR_ACCESS_DENIED 0\r\nContent-Length: 3\r\n\r\nok\n",
		"HTTP/1.1 204 No Content\r\nX-Squid-Error: ERR_CONNECT_FAIL 111\r\n\r\n",
		"HTTP/1.1 302 Found\r\nLocation: http://example.test/denied\r\nX-Squid-Error: 403 Access Denied\r\nContent-Length: 0\r\n\r\n",
	} {
		status := strings.SplitN(answer, " ", 3)[1]
		for _, method := range forwardMethods {
			t.Run(status+"/"+method, func(t *testing.T) {
				srv := squidGateway(t, answer)
				resp, _, err := askForward(t, srv, method, "http://example.test/")
				if err != nil {
					t.Fatal(err)
				}
				if got := fmt.Sprint(resp.StatusCode); got != status || resp.Header.Get("X-Rotor-Upstream") != "squid" {
					t.Errorf("client got %s (X-Rotor-Error %q), want the answer's %s from squid", got, resp.Header.Get("X-Rotor-Error"), status)
				}
				noFailures(t, srv, "squid")
				if snap := srv.Tracker().Snapshot(srv.Pool().Lookup("squid").Record()); len(snap.Targets) != 0 {
					t.Errorf("squid cools for %+v", snap.Targets)
				}
			})
		}
	}
}

// TestForwardProxyEchoedCredentialsScrubbed: a broken http:// upstream
// that echoes the request (and the password it checked) into its error
// answer's status line and X-Squid-Error must not get rotor's password or
// Proxy-Authorization token into the client's 502, the log or the
// record's history. ConnectStatusError's text hides any Basic token; the
// password as such only the endpoint knows, and the forward path did not
// pass it, as the CONNECT dialer does.
func TestForwardProxyEchoedCredentialsScrubbed(t *testing.T) {
	const pass = "up-s3cret"
	token := base64.StdEncoding.EncodeToString([]byte("rotor:" + pass))
	for _, method := range forwardMethods {
		t.Run(method, func(t *testing.T) {
			proxy := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
				head, err := rt.readHead(br)
				if err != nil {
					return
				}
				auth := ""
				for _, l := range strings.Split(head, "\r\n") {
					if v, ok := strings.CutPrefix(l, "Proxy-Authorization: "); ok {
						auth = v
					}
				}
				_, _ = io.WriteString(c, "HTTP/1.1 500 echo "+auth+" "+pass+"\r\nX-Squid-Error: ERR_FOO "+auth+" "+pass+"\r\nContent-Length: 0\r\n\r\n")
			})
			srv, logs := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\n"+
				"[[upstream]]\nurl = \"http://rotor:%s@%s\"\nname = \"sq\"\n", pass, proxy.Addr()))
			resp, body, err := askForward(t, srv, method, "http://example.test/")
			if err != nil || resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("got %s %v, want 502", statusOf(resp), err)
			}
			if !strings.Contains(body, "ERR_FOO") {
				t.Errorf("502 body %q does not say what the proxy answered", body)
			}
			line := forwardLineWithin(t, logs, 10*time.Second)
			snap := srv.Tracker().Snapshot(srv.Pool().Lookup("sq").Record())
			history := fmt.Sprintf("%+v", snap.History)
			for where, text := range map[string]string{"502 body": body, "log": logs.String(), "history": history} {
				if strings.Contains(text, pass) || strings.Contains(text, token) {
					t.Errorf("the upstream's credentials are in the %s: %s", where, text)
				}
			}
			if !strings.Contains(line, "ERR_FOO") {
				t.Errorf("log line %s does not say what the proxy answered", line)
			}
		})
	}
}
