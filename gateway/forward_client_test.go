package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// rawTarget is a loopback HTTP/1.1 server written by hand, so a test
// controls every byte of the answers and sees every byte of the requests.
type rawTarget struct {
	ln      net.Listener
	accepts atomic.Int64
	heads   chan string // request heads, in arrival order
	wg      sync.WaitGroup
	mu      sync.Mutex // guards conns
	conns   []net.Conn
}

// newRawTarget serves each connection with handle, which gets the
// connection's reader and returns when the connection should be closed.
func newRawTarget(t *testing.T, handle func(c net.Conn, br *bufio.Reader, rt *rawTarget)) *rawTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rt := &rawTarget{ln: ln, heads: make(chan string, 64)}
	rt.wg.Add(1)
	go func() { // owner: the test; ends when Cleanup closes ln
		defer rt.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			rt.accepts.Add(1)
			rt.mu.Lock()
			rt.conns = append(rt.conns, c)
			rt.mu.Unlock()
			rt.wg.Add(1)
			go func() { // owner: the test; ends when handle returns
				defer rt.wg.Done()
				defer c.Close()
				handle(c, bufio.NewReader(c), rt)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		rt.mu.Lock()
		for _, c := range rt.conns {
			c.Close()
		}
		rt.mu.Unlock()
		rt.wg.Wait()
	})
	return rt
}

func (rt *rawTarget) Addr() string { return rt.ln.Addr().String() }

// readHead reads one request head (up to the blank line) and records it.
func (rt *rawTarget) readHead(br *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		b.WriteString(line)
		if line == "\r\n" {
			rt.heads <- b.String()
			return b.String(), nil
		}
	}
}

// serveAnswers answers each request on a connection with the next of
// answers (cycling), and closes the connection after each answer when
// closeAfter is set.
func serveAnswers(closeAfter bool, answers ...string) func(net.Conn, *bufio.Reader, *rawTarget) {
	var n atomic.Int64
	return func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		for {
			if _, err := rt.readHead(br); err != nil {
				return
			}
			a := answers[int(n.Add(1)-1)%len(answers)]
			if _, err := io.WriteString(c, a); err != nil || closeAfter {
				return
			}
		}
	}
}

// directGateway starts a gateway with one direct:// upstream named "up".
func directGateway(t *testing.T) *Server {
	t.Helper()
	srv, _ := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	return srv
}

// patientGateway is directGateway with a 10 s handshake timeout, for
// tests whose request head takes long to send (byte by byte, 100 KB of
// fields): under -race on a loaded machine 300 ms was too short (they
// got a 408).
func patientGateway(t *testing.T) *Server {
	t.Helper()
	srv, _ := startGateway(t, "allow_private_destinations = true\n"+
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nhandshake_timeout = \"10s\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	return srv
}

// keepAliveClient is an HTTP client using front as its proxy over one
// kept-alive connection.
func keepAliveClient(t *testing.T, front string) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: front}), MaxIdleConnsPerHost: 1}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func noFailures(t *testing.T, srv *Server, name string) {
	t.Helper()
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup(name).Record())
	if len(snap.Counts) != 0 {
		t.Errorf("upstream %s has failures %+v, want none", name, snap.Counts)
	}
}

// TestForwardLeanReusesUpstreamConnection: kept-alive client requests are
// each a new pick, but they share one pooled tunnel through the upstream
// instead of a SOCKS5 handshake per request (issue #8).
func TestForwardLeanReusesUpstreamConnection(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL()))
	c := keepAliveClient(t, srv.Addr("http"))
	for i := 0; i < 5; i++ {
		resp, err := readAll(c.Get(target.URL("/ok")))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || bodyOf(resp) != "ok\n" || resp.Header.Get("X-Rotor-Upstream") != "up" {
			t.Fatalf("request %d: %d %q upstream %q", i, resp.StatusCode, bodyOf(resp), resp.Header.Get("X-Rotor-Upstream"))
		}
	}
	if got := up.Tunnels(); got != 1 {
		t.Errorf("upstream tunnels = %d, want 1 reused for 5 requests", got)
	}
	srv.transports.Range(func(k, _ any) bool {
		if _, ok := k.(fwdKey); !ok {
			t.Errorf("GETs went through a net/http Transport (%T), not the lean client", k)
		}
		return true
	})
	noFailures(t, srv, "up")
}

// TestForwardLeanClosedIdleConnectionRetried: a kept-alive upstream
// connection the far end closed while idle is noticed when the next
// request gets no answer on it; the request goes again on a new one,
// and it is no failure of the upstream.
func TestForwardLeanClosedIdleConnectionRetried(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(true, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"))
	srv := directGateway(t)
	c := keepAliveClient(t, srv.Addr("http"))
	for i := 0; i < 3; i++ {
		resp, err := readAll(c.Get("http://" + rt.Addr() + "/"))
		if err != nil || resp.StatusCode != 200 || bodyOf(resp) != "ok\n" {
			t.Fatalf("request %d: %v %v", i, statusOf(resp), err)
		}
	}
	if got := rt.accepts.Load(); got != 3 {
		t.Errorf("target connections = %d, want 3 (one per answer)", got)
	}
	noFailures(t, srv, "up")
}

// TestForwardLeanConnectionCloseNotReused: an answer with "Connection:
// close" ends its upstream connection.
func TestForwardLeanConnectionCloseNotReused(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nok\n"))
	srv := directGateway(t)
	c := keepAliveClient(t, srv.Addr("http"))
	for i := 0; i < 2; i++ {
		resp, err := readAll(c.Get("http://" + rt.Addr() + "/"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, statusOf(resp), err)
		}
		if v := resp.Header.Get("Connection"); v != "" {
			t.Errorf("hop-by-hop Connection %q relayed to the client", v)
		}
	}
	if got := rt.accepts.Load(); got != 2 {
		t.Errorf("target connections = %d, want 2", got)
	}
}

// TestForwardLeanAnswerFraming: informational answers are skipped, HEAD
// answers have no body, chunked bodies are decoded, and the connection
// is reused after each of them.
func TestForwardLeanAnswerFraming(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false,
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none",
		"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", // the HEAD
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nthr\r\n2\r\nee\r\n0\r\n\r\n",
		"HTTP/1.1 204 No Content\r\n\r\n",
	))
	srv := directGateway(t)
	c := keepAliveClient(t, srv.Addr("http"))
	u := "http://" + rt.Addr() + "/"
	for _, tc := range []struct {
		method     string
		wantStatus int
		wantBody   string
	}{
		{"GET", 200, "one"},
		{"HEAD", 200, ""},
		{"GET", 200, "three"},
		{"GET", 204, ""},
	} {
		req, _ := http.NewRequest(tc.method, u, nil)
		resp, err := readAll(c.Do(req))
		if err != nil {
			t.Fatalf("%s: %v", tc.method, err)
		}
		if got := bodyOf(resp); resp.StatusCode != tc.wantStatus || got != tc.wantBody {
			t.Errorf("%s: got %d %q, want %d %q", tc.method, resp.StatusCode, got, tc.wantStatus, tc.wantBody)
		}
	}
	if got := rt.accepts.Load(); got != 1 {
		t.Errorf("target connections = %d, want 1", got)
	}
}

// TestForwardLeanRequestHead: what reaches the target and an http://
// upstream. Hop-by-hop headers, the headers the client's Connection names
// and the client's proxy credentials are dropped (RFC 9110 section
// 7.6.1); an http:// upstream gets the absolute form and rotor's own
// credentials.
func TestForwardLeanRequestHead(t *testing.T) {
	const canary = "c4n4ry-pw"
	ok := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
	send := func(t *testing.T, front, host string) {
		t.Helper()
		c, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s/p?q=1 HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n"+
			"Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: 300\r\n"+
			"Te: trailers\r\nTrailer: X-T\r\nUpgrade: websocket\r\nX-Keep: yes\r\nUser-Agent: ua/1\r\n\r\n",
			host, host, basic("client", canary))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer: %v %v", statusOf(resp), err)
		}
	}
	check := func(t *testing.T, head, wantLine, wantHost string) {
		t.Helper()
		lines := strings.Split(strings.TrimSuffix(head, "\r\n\r\n"), "\r\n")
		if lines[0] != wantLine {
			t.Errorf("request line %q, want %q", lines[0], wantLine)
		}
		got := map[string]string{}
		for _, l := range lines[1:] {
			k, v, _ := strings.Cut(l, ": ")
			got[k] = v
		}
		for _, k := range []string{"Connection", "Proxy-Connection", "Keep-Alive", "Te", "Trailer", "Upgrade", "X-Drop"} {
			if v, ok := got[k]; ok {
				t.Errorf("hop-by-hop %s: %q forwarded", k, v)
			}
		}
		if got["Host"] != wantHost || got["X-Keep"] != "yes" || got["User-Agent"] != "ua/1" {
			t.Errorf("Host %q X-Keep %q User-Agent %q, want %q yes ua/1", got["Host"], got["X-Keep"], got["User-Agent"], wantHost)
		}
		if strings.Contains(head, canary) || strings.Contains(head, basic("client", canary)) {
			t.Errorf("client credentials forwarded:\n%s", head)
		}
	}

	t.Run("tunnel", func(t *testing.T) {
		rt := newRawTarget(t, serveAnswers(false, ok))
		srv := directGateway(t)
		send(t, srv.Addr("http"), rt.Addr())
		head := <-rt.heads
		check(t, head, "GET /p?q=1 HTTP/1.1", rt.Addr())
		if strings.Contains(head, "Proxy-Authorization") {
			t.Errorf("Proxy-Authorization sent through a tunnel:\n%s", head)
		}
	})
	t.Run("http upstream", func(t *testing.T) {
		proxy := newRawTarget(t, serveAnswers(false, ok))
		srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"http://rotor:up-pw@%s\"\nname = \"up\"\n", proxy.Addr()))
		send(t, srv.Addr("http"), "example.test:8080")
		head := <-proxy.heads
		check(t, head, "GET http://example.test:8080/p?q=1 HTTP/1.1", "example.test:8080")
		if want := "Proxy-Authorization: Basic " + basic("rotor", "up-pw") + "\r\n"; !strings.Contains(head, want) {
			t.Errorf("upstream credentials missing, want %q in:\n%s", want, head)
		}
	})
}

// TestForwardLeanClientGoneIsNeutral: a client that leaves while the
// target has not answered ends the upstream exchange (the connection is
// closed, not left waiting for first_byte) without blaming the upstream.
// It leaves with a reset (a FIN counts too: TestH1HalfClosedClientHasLeft).
func TestForwardLeanClientGoneIsNeutral(t *testing.T) {
	closed := make(chan struct{})
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, br) // until rotor closes
		close(closed)
	})
	srv := directGateway(t)
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	<-rt.heads
	_ = c.(*net.TCPConn).SetLinger(0)
	c.Close()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("upstream connection still open 10s after the client left")
	}
	noFailures(t, srv, "up")
}

// TestForwardLeanIdleClosedOnShutdown: pooled idle upstream connections
// hold a socket each; Shutdown closes them.
func TestForwardLeanIdleClosedOnShutdown(t *testing.T) {
	closed := make(chan struct{})
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")(c, br, rt)
		close(closed)
	})
	srv := directGateway(t)
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://"+rt.Addr()+"/", false)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("forward: %v %v", statusOf(resp), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("idle upstream connection still open 10s after Shutdown")
	}
}

// TestForwardLeanReloadDropsClient: an endpoint removed by a reload
// loses its lean client and that client's idle connections.
func TestForwardLeanReloadDropsClient(t *testing.T) {
	closed := make(chan struct{})
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")(c, br, rt)
		close(closed)
	})
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	conf := func(u string) string {
		return "allow_private_destinations = true\n" + listenConf("") + "[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"" + u + "\"\n"
	}
	srv, _ := startGateway(t, conf("direct://"))
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://"+rt.Addr()+"/", false)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("forward: %v %v", statusOf(resp), err)
	}
	cfg2, err := ParseConfig("test.toml", []byte(conf(up.URL().String())))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(cfg2); err != nil {
		t.Fatal(err)
	}
	srv.transports.Range(func(k, _ any) bool {
		t.Errorf("transport %v of a removed upstream kept after reload", k)
		return true
	})
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("idle connection of a removed upstream still open 10s after the reload")
	}
}

func TestLeanForwardable(t *testing.T) {
	for _, tc := range []struct {
		method, host string
		streamed     bool
		want         bool
	}{
		{"GET", "example.com", false, true},
		{"HEAD", "example.com:8080", false, true},
		{"OPTIONS", "[::1]:80", false, true},
		{"GET", "example.com", true, false},
		{"POST", "example.com", false, false},
		{"GET", "", false, false},
		{"GET", "bücher.example", false, false},
		{"GET", "a b", false, false},
		{"GET", "[fe80::1%en0]", false, false},
	} {
		t.Run(tc.method+" "+tc.host, func(t *testing.T) {
			r := &http.Request{Method: tc.method, Host: tc.host, URL: &url.URL{Scheme: "http", Host: tc.host, Path: "/"}}
			if got := leanForwardable(r, tc.streamed); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestForwardLeanFirstByteIsSlowBody: a target that takes the request
// and answers nothing within slow_body.first_byte, through a proxy (here
// SOCKS5, on the lean path's tunnel), is slow_body at first_byte, as it
// was through net/http's Transport. (Behind direct:// it is the target's
// target_timeout: TestForwardDirectSlowTargetIsTargetTimeout.)
func TestForwardLeanFirstByteIsSlowBody(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, br) // never answers
	})
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, logs := startGateway(t, listenConf("")+
		fmt.Sprintf("[slow_body]\nfirst_byte = \"300ms\"\n[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL()))
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://"+rt.Addr()+"/", false)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode < 500 || !strings.HasPrefix(resp.Header.Get("X-Rotor-Error"), "slow_body; stage=first_byte") {
		t.Errorf("got %d X-Rotor-Error %q, want a 5xx naming slow_body at first_byte", resp.StatusCode, resp.Header.Get("X-Rotor-Error"))
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	found := false
	for _, c := range snap.Counts {
		found = found || (c.Class == health.SlowBody && c.Stage == health.StageFirstByte)
	}
	if !found {
		t.Errorf("counts = %+v, want slow_body at first_byte", snap.Counts)
	}
	// The request's line says so too, as a tunnel's does (it said failed).
	eventuallyTrue(t, "request line with outcome slow_body", func() bool {
		return strings.Contains(logs.String(), `"outcome":"slow_body"`)
	})
}

// TestForwardRequestTargetBytes: the target gets the path and query bytes
// of the client's request line unchanged, on the lean path (GET) and the
// Transport's (POST), through a tunnel and to an http:// upstream: "|",
// "{", "}", "^", "`" and "\" are not re-escaped (a signed URL breaks when
// they are), and escapes stay as they came.
func TestForwardRequestTargetBytes(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
	for _, tc := range []struct{ name, sent, want string }{
		{"reserved bytes", "/a|b{c}^`\\d/%7C%7c?q=a|b{}^`&r=%zz", "/a|b{c}^`\\d/%7C%7c?q=a|b{}^`&r=%zz"},
		{"fragment", "/a|b?q#frag|x", "/a|b?q"},
		{"query only", "?q=|", "/?q=|"},
		{"empty query", "/x|y?", "/x|y?"},
		// A "%" that starts no escape goes on as sent (squid forwards it;
		// net/http's parser refused it with 400).
		{"stray percent", "/50%-off/100%/%2/%7c%?q=5%&r=%zz", "/50%-off/100%/%2/%7c%?q=5%&r=%zz"},
		{"stray percent and fragment", "/5%#f%", "/5%"},
	} {
		for _, method := range forwardMethods {
			send := func(t *testing.T, front, host string) {
				t.Helper()
				c, err := net.Dial("tcp", front)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				cl := ""
				if method == http.MethodPost {
					cl = "Content-Length: 0\r\n"
				}
				fmt.Fprintf(c, "%s http://%s%s HTTP/1.1\r\nHost: %s\r\n%s\r\n", method, host, tc.sent, host, cl)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("answer: %v %v", statusOf(resp), err)
				}
			}
			line := func(head string) string { l, _, _ := strings.Cut(head, "\r\n"); return l }
			t.Run(tc.name+"/"+method+"/tunnel", func(t *testing.T) {
				rt := newRawTarget(t, serveAnswers(false, ok))
				srv := directGateway(t)
				send(t, srv.Addr("http"), rt.Addr())
				if got, want := line(<-rt.heads), method+" "+tc.want+" HTTP/1.1"; got != want {
					t.Errorf("request line %q, want %q", got, want)
				}
			})
			t.Run(tc.name+"/"+method+"/http upstream", func(t *testing.T) {
				proxy := newRawTarget(t, serveAnswers(false, ok))
				srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"http://%s\"\nname = \"up\"\n", proxy.Addr()))
				send(t, srv.Addr("http"), "example.test:8080")
				if got, want := line(<-proxy.heads), method+" http://example.test:8080"+tc.want+" HTTP/1.1"; got != want {
					t.Errorf("request line %q, want %q", got, want)
				}
			})
		}
	}
}

// TestForwardLeanHeaderOrderAndCase: a forwarded request's fields reach
// the target in the client's order and with its spelling of their names
// (a browser's order is part of its fingerprint), less the hop-by-hop
// ones, Host set from the target's authority where the client had it, an
// obs-fold joined with a space; Proxy-Authorization for an http://
// upstream is rotor's own, last.
func TestForwardLeanHeaderOrderAndCase(t *testing.T) {
	ok := "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
	send := func(t *testing.T, front, target, head string) {
		t.Helper()
		c, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s/p HTTP/1.1\r\n%s\r\n", target, head)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer: %v %v", statusOf(resp), err)
		}
	}
	const sent = "host: other.example\r\nConnection: keep-alive, x-Drop\r\nuser-agent: Mozilla/5.0 (X11)\r\n" +
		"DNT: 1\r\naccept:  text/html \r\nx-lower: a\r\nProxy-Authorization: Basic Y2xpZW50OnB3\r\nX-Drop: 1\r\n" +
		"Accept-Language: en\r\nX-Fold: a\r\n  b\r\nX-Multi: 1\r\nUpgrade: h2c\r\nx-multi: 2\r\nSec-Fetch-Mode: navigate\r\n"
	want := func(host string) string {
		return "host: " + host + "\r\nuser-agent: Mozilla/5.0 (X11)\r\nDNT: 1\r\naccept: text/html\r\nx-lower: a\r\n" +
			"Accept-Language: en\r\nX-Fold: a b\r\nX-Multi: 1\r\nx-multi: 2\r\nSec-Fetch-Mode: navigate\r\n"
	}
	fields := func(head string) string {
		_, rest, _ := strings.Cut(head, "\r\n")
		return strings.TrimSuffix(rest, "\r\n")
	}
	t.Run("tunnel", func(t *testing.T) {
		rt := newRawTarget(t, serveAnswers(false, ok))
		srv := directGateway(t)
		send(t, srv.Addr("http"), rt.Addr(), sent)
		if got, want := fields(<-rt.heads), want(rt.Addr()); got != want {
			t.Errorf("fields\n%s\nwant\n%s", got, want)
		}
	})
	t.Run("http upstream", func(t *testing.T) {
		proxy := newRawTarget(t, serveAnswers(false, ok))
		srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"http://rotor:up-pw@%s\"\nname = \"up\"\n", proxy.Addr()))
		send(t, srv.Addr("http"), "example.test:8080", sent)
		wantFields := want("example.test:8080") + "Proxy-Authorization: Basic " + basic("rotor", "up-pw") + "\r\n"
		if got := fields(<-proxy.heads); got != wantFields {
			t.Errorf("fields\n%s\nwant\n%s", got, wantFields)
		}
	})
	t.Run("HTTP/1.0 without Host", func(t *testing.T) {
		rt := newRawTarget(t, serveAnswers(false, ok))
		srv := directGateway(t)
		c, err := net.Dial("tcp", srv.Addr("http"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET http://%s/p HTTP/1.0\r\nx-b: 1\r\nX-A: 2\r\n\r\n", rt.Addr())
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatal(err)
		}
		if got, want := fields(<-rt.heads), "Host: "+rt.Addr()+"\r\nx-b: 1\r\nX-A: 2\r\n"; got != want {
			t.Errorf("fields\n%s\nwant\n%s", got, want)
		}
	})
}

// TestReloadFirstByteReachesTransport: a reload's slow_body.first_byte
// applies to requests forwarded through net/http's Transport (a POST) as
// to the lean path (bug: each endpoint's Transport kept the timeout it was
// built with, at its first use, until a restart).
func TestReloadFirstByteReachesTransport(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		head, err := rt.readHead(br)
		if err != nil {
			return
		}
		if strings.HasPrefix(head, "POST /slow ") {
			time.Sleep(time.Second)
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
	})
	conf := func(firstByte string) string {
		return "allow_private_destinations = true\n" + listenConf("") + "[slow_body]\nfirst_byte = \"" + firstByte +
			"\"\n[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n"
	}
	srv, _ := startGateway(t, conf("20s"))
	post := func(path string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", srv.Addr("http"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST http://%s%s HTTP/1.1\r\nHost: %s\r\nContent-Length: 2\r\n\r\nhi", rt.Addr(), path, rt.Addr())
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if resp := post("/fast"); resp.StatusCode != 200 {
		t.Fatalf("before the reload: %d %q, want 200", resp.StatusCode, resp.Header.Get("X-Rotor-Error"))
	}
	next, err := ParseConfig("test.toml", []byte(conf("300ms")))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(next); err != nil {
		t.Fatal(err)
	}
	// Behind direct:// no answer within first_byte is the target's
	// target_timeout (directSlowIsTarget).
	if resp := post("/slow"); resp.StatusCode < 500 || !strings.HasPrefix(resp.Header.Get("X-Rotor-Error"), "target_timeout; stage=first_byte") {
		t.Fatalf("after the reload to first_byte = 300ms, an answer after 1s: %d %q, want target_timeout at first_byte", resp.StatusCode, resp.Header.Get("X-Rotor-Error"))
	}
}

// TestForwardHTTPUpstreamConnPerTarget: through an http:// upstream a kept-alive
// connection carries requests for one target only. tinyproxy reads only a
// connection's first request and then relays raw bytes to that request's
// target without saying so: when rotor sent a request for another host on
// the same connection (one idle pool per upstream), the first target
// answered it, and every later request through that connection went there.
func TestForwardHTTPUpstreamConnPerTarget(t *testing.T) {
	proxy := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		first := ""
		for {
			head, err := rt.readHead(br)
			if err != nil {
				return
			}
			if first == "" {
				line, _, _ := strings.Cut(head, "\r\n")
				u, err := url.Parse(strings.Fields(line)[1])
				if err != nil {
					return
				}
				first = u.Host
			}
			if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(first), first); err != nil {
				return
			}
		}
	})
	srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"http://%s\"\nname = \"tiny\"\n", proxy.Addr()))
	for _, method := range forwardMethods { // the lean path and net/http's Transport
		client := keepAliveClient(t, srv.Addr("http"))
		for _, host := range []string{"a.example.test", "b.example.test", "a.example.test", "b.example.test"} {
			req, _ := http.NewRequest(method, "http://"+host+"/"+method, nil)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) != host {
				t.Fatalf("%s for %s answered by %q's connection", method, host, body)
			}
		}
	}
}

// TestForwardClientGoneAtLastFlush: a client that left while its answer
// streamed is client_gone even when the write that found it gone was the
// last before the answer's end (bug: a failed flush was not looked at, and
// the request was logged ok with bytes it never got).
func TestForwardClientGoneAtLastFlush(t *testing.T) {
	left := make(chan struct{})
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
		<-left
		// The client closed (a FIN, which the client watch also takes
		// for gone at its next check, whichever comes first): rotor's
		// next write is taken by the kernel and answered with a reset,
		// the one after it fails, and is the last before the end, which
		// comes in a read of its own.
		for _, chunk := range []string{"6\r\nsecond\r\n", "5\r\nthird\r\n", "0\r\n\r\n"} {
			time.Sleep(200 * time.Millisecond)
			_, _ = io.WriteString(c, chunk)
		}
	})
	srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	br := bufio.NewReader(c)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "first\r\n" {
			break
		}
	}
	c.Close()
	close(left)
	eventuallyTrue(t, "the request logged", func() bool { return strings.Contains(logs.String(), `"request forwarded"`) })
	if !strings.Contains(logs.String(), `"outcome":"client_gone"`) {
		t.Errorf("want outcome client_gone; logs:\n%s", logs.String())
	}
}

// TestForwardIdleConnUnsolicitedBytes: bytes a server sends on a
// kept-alive connection after its answer ended are no answer to the next
// request: that connection is not reused (bug: the next request, from
// another client, got them as its answer — here a forged "INJECTED"
// response after a HEAD's — and every later answer on that connection
// was one request behind).
func TestForwardIdleConnUnsolicitedBytes(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		for {
			head, err := rt.readHead(br)
			if err != nil {
				return
			}
			if strings.HasPrefix(head, "HEAD ") {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 47\r\n\r\n")
				time.Sleep(100 * time.Millisecond)
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nINJECTED")
				continue
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nnormal")
		}
	})
	srv := directGateway(t)
	ask := func(method string) string {
		c, err := net.Dial("tcp", srv.Addr("http"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "%s http://%s/x HTTP/1.1\r\nHost: %s\r\n\r\n", method, rt.Addr(), rt.Addr())
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	ask(http.MethodHead)
	time.Sleep(400 * time.Millisecond) // the unsolicited answer has come
	if got := ask(http.MethodGet); got != "normal" {
		t.Fatalf("a new client's GET got %q, want the target's answer to it", got)
	}
}

// TestForwardStrayPercentInPieces: a stray "%" in a path is forwarded as
// sent however the request line arrives: whole, cut in two, byte by byte,
// and as the second request of a kept-alive connection cut across
// segments (bug: only a line already whole in the buffer was mended; the
// others got 400).
func TestForwardStrayPercentInPieces(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"))
	srv := patientGateway(t) // byte by byte is 40 writes 5 ms apart
	req := fmt.Sprintf("GET http://%s/50%%-off HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	for _, tc := range []struct {
		name   string
		pieces []string
		second bool
	}{
		{"whole", []string{req}, false},
		{"in two", []string{req[:20], req[20:]}, false},
		{"byte by byte", strings.Split(req[:40], ""), false},
		{"second request in two", []string{req[:25], req[25:]}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			if tc.second {
				io.WriteString(c, req)
				if r, _ := h1Read(t, br, "GET"); r.StatusCode != 200 {
					t.Fatalf("first request: %d", r.StatusCode)
				}
				<-rt.heads
			}
			pieces := tc.pieces
			if tc.name == "byte by byte" {
				pieces = append(pieces, req[40:])
			}
			for _, p := range pieces {
				io.WriteString(c, p)
				time.Sleep(5 * time.Millisecond)
			}
			if r, _ := h1Read(t, br, "GET"); r.StatusCode != 200 {
				t.Fatalf("status %d, want 200", r.StatusCode)
			}
			if line, _, _ := strings.Cut(<-rt.heads, "\r\n"); line != "GET /50%-off HTTP/1.1" {
				t.Errorf("target got %q", line)
			}
		})
	}
}
