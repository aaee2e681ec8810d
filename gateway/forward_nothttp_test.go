package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// socksAsHTTP is a SOCKS5 server listed as an http:// upstream: to the
// request rotor writes it answers what a SOCKS5 server answers a
// greeting it cannot take, 05 FF (no acceptable method), then closes.
func socksAsHTTP(t *testing.T, hold bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() { // owner: this test; ends when Cleanup closes ln
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { // owner: this test; ends when the connection closes
				defer wg.Done()
				defer c.Close()
				if _, err := c.Read(make([]byte, 4096)); err != nil {
					return
				}
				_, _ = c.Write([]byte{0x05, 0xff})
				if hold {
					_, _ = io.Copy(io.Discard, c)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestForwardNotHTTPUpstreamIsTheUpstreams: an http:// upstream that is
// really a SOCKS server answers rotor's request with bytes that are no
// HTTP at all, on a fresh connection: that is the upstream's fault
// (upstream_error, at first_byte: the request was written), and the bad
// one cools, as its probe says. A GET goes on to another upstream; a
// POST, which the upstream may have sent on, gets a 502 and is not sent
// again (TestForwardNotHTTPAfterSentNotResent). rotor used to blame the
// target (502 target_unreachable, no retry, no cooling).
func TestForwardNotHTTPUpstreamIsTheUpstreams(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	for _, method := range []string{http.MethodGet, http.MethodPost} { // lean path, Transport
		for _, hold := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s hold=%v", method, hold), func(t *testing.T) {
				bad := socksAsHTTP(t, hold)
				good := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
				srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 2\n"+
					"[[upstream]]\nurl = \"http://%s\"\nname = \"bad\"\n[[upstream]]\nurl = %q\nname = \"good\"\n", bad, good.URL()))
				// Round-robin: within two requests one starts on bad.
				failed := 0
				for i := range 2 {
					c, br := h1Dial(t, srv)
					body := ""
					if method == http.MethodPost {
						body = "hello"
					}
					fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", method, target.URL("/ok"), target.Addr(), len(body), body)
					r, b := h1Read(t, br, method)
					switch {
					case r.StatusCode == http.StatusOK && r.Header.Get("X-Rotor-Upstream") == "good":
					case method == http.MethodPost && r.StatusCode == http.StatusBadGateway &&
						r.Header.Get("X-Rotor-Error") == "upstream_error; stage=first_byte; upstream=bad":
						failed++
					default:
						t.Fatalf("request %d: %d %q (%s), want 200 from good", i, r.StatusCode, r.Header.Get("X-Rotor-Error"), strings.TrimSpace(b))
					}
				}
				if want := map[string]int{http.MethodGet: 0, http.MethodPost: 1}[method]; failed != want {
					t.Errorf("%d 502s from bad, want %d", failed, want)
				}
				snap := srv.Tracker().Snapshot(srv.Pool().Lookup("bad").Record())
				if snap.State != health.Cooling || snap.Reason != health.UpstreamError || snap.Stage != health.StageFirstByte {
					t.Errorf("bad upstream %v %v %v (%s), want cooling upstream_error first_byte", snap.State, snap.Reason, snap.Stage, snap.Detail)
				}
				noFailures(t, srv, "good")
			})
		}
	}
}

// An answer that is not HTTP on a kept-alive connection to an http://
// upstream may be the end of an earlier answer: the request goes again on
// a fresh connection, which here answers well, and nobody is blamed.
func TestForwardNotHTTPOnKeptAliveConnTriesFreshOne(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		for i := 0; ; i++ {
			select { // rt.heads holds 64
			case <-rt.heads:
			default:
			}
			if _, err := rt.readHead(br); err != nil {
				return
			}
			if i == 1 {
				_, _ = c.Write([]byte{0x05, 0xff})
				return
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"); err != nil {
				return
			}
		}
	})
	srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = \"http://%s\"\nname = \"up\"\n", rt.Addr()))
	c := keepAliveClient(t, srv.Addr("http"))
	for i := range 3 {
		resp, err := readAll(c.Get(target.URL("/ok")))
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: %v %v, want 200", i, statusOf(resp), err)
		}
	}
	// Each connection answers its second request with 05 FF: the
	// second and third requests went again on fresh ones.
	if n := rt.accepts.Load(); n != 3 {
		t.Errorf("%d upstream connections, want 3", n)
	}
	noFailures(t, srv, "up")
}

// The same upstream answering CONNECT with 05 FF is the upstream's fault
// too: upstream_error at proxy_handshake, and the tunnel goes through
// another upstream.
func TestConnectNotHTTPUpstreamIsTheUpstreams(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("hold=%v", hold), func(t *testing.T) {
			bad := socksAsHTTP(t, hold)
			good := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
			srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 2\n"+
				"[[upstream]]\nurl = \"http://%s\"\nname = \"bad\"\n[[upstream]]\nurl = %q\nname = \"good\"\n", bad, good.URL()))
			for i := range 2 {
				c, br := h1Dial(t, srv)
				fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target.Addr(), target.Addr())
				r, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil {
					t.Fatal(err)
				}
				if r.StatusCode != http.StatusOK || r.Header.Get("X-Rotor-Upstream") != "good" {
					t.Fatalf("CONNECT %d: %d %q, want 200 from good", i, r.StatusCode, r.Header.Get("X-Rotor-Error"))
				}
				c.Close()
			}
			snap := srv.Tracker().Snapshot(srv.Pool().Lookup("bad").Record())
			if snap.State != health.Cooling || snap.Reason != health.UpstreamError || snap.Stage != health.StageProxyHandshake {
				t.Errorf("bad upstream %v %v %v (%s), want cooling upstream_error proxy_handshake", snap.State, snap.Reason, snap.Stage, snap.Detail)
			}
		})
	}
}
