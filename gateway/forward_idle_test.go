package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// idleForward is how many idle connections the lean forward clients of
// srv hold.
func idleForward(srv *Server) int {
	n := 0
	srv.transports.Range(func(_, v any) bool {
		if fc, ok := v.(*fwdClient); ok {
			fc.mu.Lock()
			n += fc.nidle
			fc.mu.Unlock()
		}
		return true
	})
	return n
}

// TestForwardIdleClosedByPeerIsClosed: a kept-alive upstream connection
// whose far end closes while it is idle is closed by rotor within a few
// seconds, without any new request (bug: it sat in CLOSE-WAIT, holding
// an fd and a max_conns slot, until it was reused or fwdIdleTimeout, 90
// s, passed). Here the target half-closes after its answer and waits for
// rotor's end of the connection.
func TestForwardIdleClosedByPeerIsClosed(t *testing.T) {
	closed := make(chan struct{})
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(15 * time.Second)) // bounded: the test fails first
		if _, err := io.Copy(io.Discard, br); err == nil {
			close(closed) // rotor's FIN
		}
	})
	srv := directGateway(t)
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://"+rt.Addr()+"/", false)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("forward: %v %v", statusOf(resp), err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("the idle upstream connection the target closed still open after 10s (%d idle)", idleForward(srv))
	}
	eventuallyTrue(t, "the closed connection out of the idle pool", func() bool { return idleForward(srv) == 0 })
}

// TestForwardIdleTLSClosedByPeerIsClosed: the same for a connection to an
// https:// upstream, whose TLS records cannot be peeked at (a session
// ticket may come unasked): the peer's end of the TCP connection is seen
// under them.
func TestForwardIdleTLSClosedByPeerIsClosed(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok\n") // the proxy answering an absolute-form GET
	}))
	t.Cleanup(up.Close)
	srv := startGatewayOpts(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"tls\"\n", up.URL),
		Options{UpstreamTLS: up.Client().Transport.(*http.Transport).TLSClientConfig})
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://example.test/", false)
	if err != nil || resp.StatusCode != http.StatusOK || !strings.HasPrefix(bodyOf(resp), "ok") {
		t.Fatalf("forward: %v %v", statusOf(resp), err)
	}
	if n := idleForward(srv); n != 1 {
		t.Fatalf("%d idle connections after the answer, want 1", n)
	}
	up.CloseClientConnections()
	deadline := time.Now().Add(10 * time.Second)
	for idleForward(srv) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the idle TLS connection the upstream closed still pooled after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestForwardIdleSweepStops: the sweep runs while connections are idle
// and not when none is (no timer firing for an empty pool).
func TestForwardIdleSweepStops(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"))
	srv := directGateway(t)
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://"+rt.Addr()+"/", false)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("forward: %v %v", statusOf(resp), err)
	}
	var fc *fwdClient
	srv.transports.Range(func(_, v any) bool {
		fc, _ = v.(*fwdClient)
		return fc == nil
	})
	if fc == nil {
		t.Fatal("no lean forward client")
	}
	armed := func() bool {
		fc.mu.Lock()
		defer fc.mu.Unlock()
		return fc.sweep != nil
	}
	if !armed() {
		t.Fatal("no sweep armed while a connection is idle")
	}
	fc.trimIdle(0)
	eventuallyTrue(t, "the sweep to stop once no connection is idle", func() bool { return !armed() })
}
