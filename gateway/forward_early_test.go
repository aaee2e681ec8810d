package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// earlyResetProxy is an http:// upstream (as tinyproxy relays a target
// that does so) that answers each request as soon as its head is in,
// then resets the connection while rotor still writes the request body.
func earlyResetProxy(t *testing.T, answer string) *rawTarget {
	return newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		select { // rt.heads holds 64
		case <-rt.heads:
		default:
		}
		if _, err := rt.readHead(br); err != nil {
			return
		}
		if _, err := io.WriteString(c, answer); err != nil {
			return
		}
		// As servers do, give the answer a moment to be read before the
		// reset: a RST that arrives first makes Linux drop the unread
		// answer in rotor's receive queue, which no proxy can relay (a
		// flake under -race, ~1 run in 7). The body is still coming, so
		// the close still resets, and rotor's writes fail after it.
		time.Sleep(100 * time.Millisecond)
		_ = c.(*net.TCPConn).SetLinger(0)
	})
}

// TestForwardEarlyAnswerThenResetIsRelayed: an upstream that answers a
// request before its body is all sent (a target's 413 or 401 through
// tinyproxy) and then resets the connection has answered: the client gets
// that answer, and nobody is blamed. rotor used to answer 502
// target_unreachable now and then (whenever net/http's Transport saw the
// failed write before the answer), and cool the upstream for the host.
func TestForwardEarlyAnswerThenResetIsRelayed(t *testing.T) {
	up := earlyResetProxy(t, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
	srv, logs := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = \"http://%s\"\nname = \"up\"\n", up.Addr()))
	for i := range 30 {
		resp := bigUpload(t, srv, "example.test", 8<<20, false)
		if resp == nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("upload %d: %v (%s), want the early 413\n%s", i, statusOf(resp), xRotorError(resp), logs)
		}
	}
	noFailures(t, srv, "up")
}

func xRotorError(resp *http.Response) string {
	if resp == nil {
		return ""
	}
	return resp.Header.Get("X-Rotor-Error")
}
