package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestForwardFailureLogNamesUpstream: the line of a forwarded request
// whose attempts failed names the upstream, as a tunnel's line does
// (bug: "request forwarded" lines of failures had no "upstream" field,
// on the lean path and the Transport's alike, while "tunnel closed" lines
// of the same failure had it). Never with the upstream's password.
func TestForwardFailureLogNamesUpstream(t *testing.T) {
	const canary = "c4n4ry-up-pw"
	dead := upstreamtest.ClosedPort(t)
	// A gateway each: the first failure cools the upstream.
	start := func(t *testing.T) (*Server, *logBuffer) {
		return startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"0s\"\n"+
			"[[upstream]]\nurl = \"http://rotor:%s@%s\"\nname = \"dead\"\n", canary, dead))
	}
	srv, logs := start(t)
	socksConnect(t, srv.Addr("socks5"), "example.test:80")
	var tunnel []map[string]any
	eventuallyTrue(t, "the tunnel's line", func() bool {
		tunnel = linesWith(t, logs, "tunnel closed")
		return len(tunnel) > 0
	})
	if tunnel[0]["upstream"] != "dead" {
		t.Fatalf("the tunnel line names upstream %v, want dead: %v", tunnel[0]["upstream"], tunnel[0])
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} { // lean path, Transport
		t.Run(method, func(t *testing.T) {
			srv, logs := start(t)
			c := forwardingClient(t, srv)
			req, _ := http.NewRequest(method, "http://example.test/x", nil)
			if method == http.MethodPost {
				req.Body = io.NopCloser(strings.NewReader("body"))
				req.ContentLength = -1
			}
			resp, err := readAll(c.Do(req))
			if err != nil || resp.StatusCode != http.StatusBadGateway {
				t.Fatalf("through a dead upstream: %v %v, want 502", statusOf(resp), err)
			}
			var lines []map[string]any
			eventuallyTrue(t, "the request's line", func() bool {
				lines = linesWith(t, logs, "request forwarded")
				return len(lines) > 0
			})
			for _, k := range []string{"upstream", "attempts", "class", "stage", "outcome"} {
				if fmt.Sprint(tunnel[0][k]) != fmt.Sprint(lines[0][k]) {
					t.Errorf("%s: tunnel line %v, forwarded request's %v, want the same for the same failure", k, tunnel[0][k], lines[0][k])
				}
			}
			if strings.Contains(logs.String(), canary) {
				t.Errorf("the upstream's password in the log:\n%s", logs)
			}
		})
	}
	if strings.Contains(logs.String(), canary) {
		t.Errorf("the upstream's password in the log:\n%s", logs)
	}
}

// TestForwardClientGoneLogNamesUpstream: a client that leaves while its
// request is on an upstream is logged client_gone with that upstream
// named (it had none: the attempt ended with the client's cancel, not an
// attempts error).
func TestForwardClientGoneLogNamesUpstream(t *testing.T) {
	hole := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}})
	srv, logs := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = %q\nname = \"hole\"\n", hole.URL().String()))
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET http://example.test/ HTTP/1.1\r\nHost: example.test\r\n\r\n")
	eventuallyTrue(t, "the request at the upstream", func() bool { return hole.Connections() > 0 })
	_ = c.(*net.TCPConn).SetLinger(0)
	c.Close()
	var lines []map[string]any
	eventuallyTrue(t, "the request's line", func() bool {
		lines = linesWith(t, logs, "request forwarded")
		return len(lines) > 0
	})
	if got := lines[0]; got["outcome"] != "client_gone" || got["upstream"] != "hole" {
		t.Errorf("line outcome %v upstream %v, want client_gone hole: %v", got["outcome"], got["upstream"], got)
	}
}
