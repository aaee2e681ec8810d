package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// The HTTP front takes a client that closes its connection (a FIN, as
// requests, aiohttp, httpx and curl -m do when their timeout fires) while
// its request waits or runs for gone, as squid does by default
// (half_closed_clients off) and as the SOCKS5 front does: only a reset
// used to count, so each such request held its socket and goroutine and
// kept its upstream exchange going (retried on another upstream, a slow
// start ramp spent on it) until its wait or first_byte ran out.

// h1Lines returns the log lines with message msg.
func h1Lines(logs *logBuffer, msg string) []string {
	var out []string
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if strings.Contains(l, `"message":"`+msg+`"`) {
			out = append(out, l)
		}
	}
	return out
}

// wantClientGoneLines checks that every line with message msg says
// client_gone at info, and that there are n of them.
func wantClientGoneLines(t *testing.T, logs *logBuffer, msg string, n int) {
	t.Helper()
	eventuallyTrue(t, fmt.Sprintf("%d %q lines", n, msg), func() bool { return len(h1Lines(logs, msg)) >= n })
	for _, l := range h1Lines(logs, msg) {
		if !strings.Contains(l, `"outcome":"client_gone"`) || !strings.Contains(l, `"level":"info"`) {
			t.Errorf("line %s, want outcome client_gone at info", l)
		}
	}
}

// h1Conns is the number of the HTTP front's open client connections.
func h1Conns(srv *Server) int {
	srv.h1.mu.Lock()
	defer srv.h1.mu.Unlock()
	return len(srv.h1.conns)
}

// TestH1ConnectClientClosedWhileWaiting: CONNECT clients that close while
// rotor waits for an eligible upstream (wait_for_upstream 20s) stop
// waiting at once: rotor_waiting_clients and the front's connections go
// back to 0, each logged client_gone. They stayed for the whole 20 s.
func TestH1ConnectClientClosedWhileWaiting(t *testing.T) {
	upstreamtest.CheckGoroutines(t)
	srv, logs := startGateway(t, "[pool]\nwait_for_upstream = \"20s\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:9\"\nname = \"off\"\ndisabled = true\n")
	const n = 20
	var conns []net.Conn
	for range n {
		c, err := net.Dial("tcp", srv.Addr("http"))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
		conns = append(conns, c)
	}
	eventuallyTrue(t, "every client waiting", func() bool { return srv.Pool().Waiting() == n })
	time.Sleep(300 * time.Millisecond) // a few client checks
	left := time.Now()
	for _, c := range conns {
		c.Close() // a FIN: nothing unread here, so no reset
	}
	for srv.Pool().Waiting() != 0 || h1Conns(srv) != 0 {
		if time.Since(left) > 5*time.Second {
			t.Fatalf("%v after the clients closed: %d still waiting, %d connections open", time.Since(left), srv.Pool().Waiting(), h1Conns(srv))
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantClientGoneLines(t, logs, "tunnel closed", n)
}

// TestH1ConnectClientClosedWhileDialling: a CONNECT client that closes
// while the upstream handshake runs (curl -m1 -p -x http://… to a target
// that never accepts) ends the dial at once, logged client_gone, and the
// upstream is neither failed nor credited. rotor waited out
// pool.handshake_timeout and logged failed target_timeout.
func TestH1ConnectClientClosedWhileDialling(t *testing.T) {
	upstreamtest.CheckGoroutines(t)
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}})
	srv, logs := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nhandshake_timeout = \"8s\"\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), up.URL().String()))
	e := srv.Pool().Lookup("up")
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "CONNECT 10.255.255.1:443 HTTP/1.1\r\nHost: 10.255.255.1:443\r\n\r\n")
	eventuallyTrue(t, "dial started", func() bool { return e.Active() == 1 })
	time.Sleep(300 * time.Millisecond)
	left := time.Now()
	c.Close()
	for e.Active() != 0 {
		if time.Since(left) > 3*time.Second {
			t.Fatalf("the dial still runs %v after the client closed", time.Since(left))
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantClientGoneLines(t, logs, "tunnel closed", 1)
	snap := srv.Tracker().Snapshot(e.Record())
	if snap.State != health.Eligible || len(snap.Counts) != 0 || snap.Successes != 0 {
		t.Errorf("after a departed client: state %v, failures %v, successes %d; want eligible, no outcome",
			snap.State, snap.Counts, snap.Successes)
	}
}

// lateTarget answers each request after wait, unless rotor closes the
// connection first (closed then counts it).
func lateTarget(t *testing.T, wait time.Duration) (rt *rawTarget, closed *atomic.Int64) {
	closed = &atomic.Int64{}
	rt = newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, req.Body)
		rt.heads <- req.Method + " " + req.URL.String()
		gone := make(chan struct{})
		go func() { // owner: this handler; ends at rotor's close or the test's
			_, _ = io.Copy(io.Discard, br)
			close(gone)
		}()
		select {
		case <-gone:
			closed.Add(1)
		case <-time.After(wait):
			// A small answer, the kind that fits a dead client's socket.
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
			c.Close()
			<-gone
		}
	})
	return rt, closed
}

// TestH1ForwardClientClosedWhileWaitingForAnswer: a forwarded request
// whose client closes while the target has not answered ends the upstream
// exchange at once (its connection closed), is logged client_gone, is
// not retried on another upstream and blames none. It ran until the
// target answered (then logged ok, the answer written into a dead
// socket) or first_byte ran out on every attempt.
func TestH1ForwardClientClosedWhileWaitingForAnswer(t *testing.T) {
	for _, tc := range []struct{ name, req string }{
		{"GET", "GET http://%[1]s/g HTTP/1.1\r\nHost: %[1]s\r\n\r\n"},
		{"POST", "POST http://%[1]s/p HTTP/1.1\r\nHost: %[1]s\r\nContent-Length: 5\r\n\r\nhello"},
		{"chunked POST", "POST http://%[1]s/p HTTP/1.1\r\nHost: %[1]s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, closed := lateTarget(t, 8*time.Second)
			srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
				"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
			c, err := net.Dial("tcp", srv.Addr("http"))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(c, tc.req, rt.Addr())
			<-rt.heads
			time.Sleep(300 * time.Millisecond)
			left := time.Now()
			c.Close()
			for closed.Load() != 1 {
				if time.Since(left) > 5*time.Second {
					t.Fatalf("the upstream exchange still runs %v after the client closed", time.Since(left))
				}
				time.Sleep(10 * time.Millisecond)
			}
			wantClientGoneLines(t, logs, "request forwarded", 1)
			if n := rt.accepts.Load(); n != 1 {
				t.Errorf("the target got %d connections, want 1 (no retry for a departed client)", n)
			}
			noFailures(t, srv, "up")
		})
	}
}

// TestH1HalfClosedClientHasLeft: a client that ends its sending side
// (shutdown SHUT_WR) after a complete request has left, as for squid's
// default: the request is cancelled and logged client_gone, nothing is
// answered, the connection closes. rotor used to serve it (RFC 9112
// section 9.6 allows a client to read after a half-close, but TCP cannot
// tell that from a close, which is what clients do when they give up).
func TestH1HalfClosedClientHasLeft(t *testing.T) {
	for _, tc := range []struct{ name, req string }{
		{"GET", "GET http://%[1]s/g HTTP/1.1\r\nHost: %[1]s\r\n\r\n"},
		{"POST with a body", "POST http://%[1]s/p HTTP/1.1\r\nHost: %[1]s\r\nContent-Length: 5\r\n\r\nhello"},
		{"POST with a chunked body", "POST http://%[1]s/p HTTP/1.1\r\nHost: %[1]s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		// A request pipelined behind the first is not served either.
		{"pipelined", "GET http://%[1]s/1 HTTP/1.1\r\nHost: %[1]s\r\n\r\nGET http://%[1]s/2 HTTP/1.1\r\nHost: %[1]s\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt, closed := lateTarget(t, 8*time.Second)
			srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
				"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
			c, br := h1Dial(t, srv)
			fmt.Fprintf(c, tc.req, rt.Addr())
			<-rt.heads
			if err := c.(*net.TCPConn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if b, err := io.ReadAll(br); err != nil || len(b) != 0 {
				t.Fatalf("read %q, %v; want the connection closed with no answer", b, err)
			}
			eventuallyTrue(t, "the upstream exchange ended", func() bool { return closed.Load() == 1 })
			wantClientGoneLines(t, logs, "request forwarded", 1)
			select {
			case head := <-rt.heads:
				t.Errorf("the target got another request: %s", head)
			default:
			}
			noFailures(t, srv, "up")
		})
	}
}

// TestH1ConnectTunnelBytesThenFIN: a CONNECT client that sent bytes for
// its tunnel with the request and then ended its sending side has not
// left, as on the SOCKS5 front: it waits for a free upstream, then its
// bytes reach the target and the answer comes back.
func TestH1ConnectTunnelBytesThenFIN(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n%s\n[pool]\nstart_eligible = true\nwait_for_upstream = \"10s\"\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\nmax_conns = 1\n",
		probeConf(target)))
	holder, _ := rawSOCKS(t, srv.Addr("socks5"), target.Addr(), nil) // takes the only slot
	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "CONNECT %[1]s HTTP/1.1\r\nHost: %[1]s\r\n\r\nGET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target.Addr())
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, "client waiting", func() bool { return srv.Pool().Waiting() == 1 })
	time.Sleep(500 * time.Millisecond)
	if srv.Pool().Waiting() != 1 {
		t.Fatal("a client that sent its tunnel's bytes before its FIN was taken for gone")
	}
	holder.Close()
	r, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT answer %v, %v; want 200", statusOf(r), err)
	}
	resp, body := h1Read(t, br, http.MethodGet)
	if resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("through the tunnel: %d %q, want 200 ok", resp.StatusCode, body)
	}
}
