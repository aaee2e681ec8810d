package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// forwardLineWith waits for the first log line with message msg and
// returns it decoded.
func forwardLineWith(t *testing.T, logs *logBuffer, msg string) map[string]any {
	t.Helper()
	var lines []map[string]any
	eventuallyTrue(t, "a line "+msg, func() bool {
		lines = linesWith(t, logs, msg)
		return len(lines) > 0
	})
	return lines[0]
}

// TestForwardLogOutcomes: the line of a forwarded request says what
// happened. An answer relayed whole while its upstream was reported for it
// (a target_http_error status) is outcome target_http_error with its
// class and stage, not ok; a 503 with no upstream eligible (none tried)
// is "request not forwarded", not "request forwarded"; target is host:port
// (port 80 when the URL has none), as on a tunnel's line; a request the
// upstream proxy rejected as the client's (squid ERR_INVALID_REQ) is at
// info, not warn.
func TestForwardLogOutcomes(t *testing.T) {
	t.Run("relayed but reported", func(t *testing.T) {
		rt := newRawTarget(t, serveAnswers(true, "HTTP/1.1 403 Forbidden\r\nContent-Length: 2\r\n\r\nno"))
		srv, logs := startGateway(t, "allow_private_destinations = true\n[target_http_error]\nstatuses = [403]\n"+
			"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
		resp, err := httpGet(t, srv.Addr("http"), "", "", "http://"+rt.Addr()+"/", false)
		if err != nil || resp.StatusCode != http.StatusForbidden {
			t.Fatalf("forward: %v %v, want the target's 403", statusOf(resp), err)
		}
		line := forwardLineWith(t, logs, "request forwarded")
		if line["outcome"] != "target_http_error" || line["class"] != "target_http_error" || line["stage"] != "http_status" {
			t.Errorf("line %v, want outcome and class target_http_error at http_status", line)
		}
		if line["target"] != rt.Addr() {
			t.Errorf("line target %v, want %s", line["target"], rt.Addr())
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		srv, logs := startGateway(t, "[pool]\nwait_for_upstream = \"0s\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:9\"\nname = \"off\"\ndisabled = true\n")
		resp, err := httpGet(t, srv.Addr("http"), "", "", "http://example.test/x", false)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("forward: %v %v, want 503", statusOf(resp), err)
		}
		line := forwardLineWith(t, logs, "request not forwarded")
		if line["outcome"] != "unavailable" || line["target"] != "example.test:80" {
			t.Errorf("line %v, want outcome unavailable, target example.test:80", line)
		}
		if got := linesWith(t, logs, "request forwarded"); len(got) != 0 {
			t.Errorf("a request no upstream took logged as forwarded: %v", got)
		}
	})
	t.Run("rejected as the client's", func(t *testing.T) {
		proxy := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
			if _, err := rt.readHead(br); err != nil {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nServer: squid\r\nX-Squid-Error: ERR_INVALID_REQ 0\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		})
		srv, logs := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"http://%s\"\nname = \"sq\"\n", proxy.Addr()))
		resp, err := httpGet(t, srv.Addr("http"), "", "", "http://example.test/x", false)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("forward: %v %v, want 400", statusOf(resp), err)
		}
		line := forwardLineWith(t, logs, "request forwarded")
		if line["level"] != "info" {
			t.Errorf("line %v, want it at info (the client's request was refused)", line)
		}
	})
}
