package upstream

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

func TestConnectSuccess(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	tests := []struct {
		name     string
		opts     upstreamtest.Options
		wantConn string
	}{
		{name: "http no auth", opts: upstreamtest.Options{}, wantConn: "tcp"},
		{name: "http basic", opts: upstreamtest.Options{Username: "u", Password: "p:w@d é"}, wantConn: "tcp"},
		{name: "https basic", opts: upstreamtest.Options{Username: "u", Password: "p", TLS: true}, wantConn: "tls"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fk := upstreamtest.NewHTTPProxy(t, tt.opts)
			cfg := testCfg()
			cfg.TLS = fk.ClientTLS()
			c, err := dial(t, mustDialer(t, fk.URL(), cfg), target.Addr())
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			switch c.(type) {
			case *net.TCPConn:
				if tt.wantConn != "tcp" {
					t.Fatalf("conn is %T", c)
				}
			case *tls.Conn:
				if tt.wantConn != "tls" {
					t.Fatalf("conn is %T", c)
				}
			default:
				t.Fatalf("conn is %T, want the raw conn", c)
			}
			roundTrip(t, c)
			if fk.Tunnels() != 1 {
				t.Fatalf("Tunnels() = %d, want 1", fk.Tunnels())
			}
		})
	}
}

// TestConnectOverRead: tunnel bytes that arrive with the 200 are delivered
// first, and the wrapper still half-closes.
func TestConnectOverRead(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	for _, useTLS := range []bool{false, true} {
		fk := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{TLS: useTLS,
			Mode: upstreamtest.Mode{Preamble: []byte("EARLY-")}})
		cfg := testCfg()
		cfg.TLS = fk.ClientTLS()
		c, err := dial(t, mustDialer(t, fk.URL(), cfg), target.Addr())
		if err != nil {
			t.Fatalf("tls=%v: %v", useTLS, err)
		}
		bc, ok := c.(*bufferedConn)
		if !ok {
			t.Fatalf("tls=%v: conn is %T, want *bufferedConn", useTLS, c)
		}
		if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if err := bc.CloseWrite(); err != nil {
			t.Fatalf("CloseWrite: %v", err)
		}
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(got, []byte("EARLY-HTTP/1.1 200 OK")) || !bytes.HasSuffix(got, []byte("ok\n")) {
			t.Fatalf("tls=%v: read %q", useTLS, got)
		}
	}
}

func TestBufferedConnWriteTo(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() { // owner: this test; exits after writing and closing
		b.Write([]byte("tail"))
		b.Close()
	}()
	c := &bufferedConn{Conn: a, buf: []byte("head-")}
	var out bytes.Buffer
	n, err := c.WriteTo(&out)
	if err != nil || n != 9 || out.String() != "head-tail" {
		t.Fatalf("WriteTo = %d, %v, %q", n, err, out.String())
	}
	if c.NetConn() != a {
		t.Fatal("NetConn")
	}
}

func TestConnectFaults(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	closed := upstreamtest.ClosedPort(t)
	auth := upstreamtest.Options{Username: "u", Password: "p"}
	status := func(code int, reason string, kv ...string) upstreamtest.Mode {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return upstreamtest.Mode{Fault: upstreamtest.Reply, Code: code, Reason: reason, Header: h}
	}
	tests := []struct {
		name       string
		mode       upstreamtest.Mode
		badPass    bool
		noCreds    bool
		addr       string
		class      health.Class
		stage      health.Stage
		wantStatus int // expected *ConnectStatusError, 0 = none
	}{
		{name: "refuse TCP", mode: upstreamtest.Mode{Fault: upstreamtest.Refuse}, class: health.Refused, stage: health.StageDial},
		{name: "close after accept", mode: upstreamtest.Mode{Fault: upstreamtest.CloseAfterAccept}, class: health.UpstreamError, stage: health.StageProxyHandshake},
		{name: "black hole", mode: upstreamtest.Mode{Fault: upstreamtest.BlackHole}, class: health.Timeout, stage: health.StageProxyHandshake},
		// An http:// proxy proves nothing before it answers CONNECT: the
		// dialer cannot tell a silent proxy from one still reaching the
		// target (the attempt loop can: TestFailedTargetWait).
		{name: "hang after request", mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}, class: health.Timeout, stage: health.StageProxyHandshake},
		{name: "garbage", mode: upstreamtest.Mode{Fault: upstreamtest.Garbage}, class: health.UpstreamError, stage: health.StageProxyHandshake},
		{name: "unterminated header", mode: upstreamtest.Mode{Fault: upstreamtest.Garbage, Garbage: []byte("HTTP/1.1 200 OK\r\nX: y\r\n")}, class: health.Timeout, stage: health.StageProxyHandshake},
		{name: "reject auth 407", mode: upstreamtest.Mode{Fault: upstreamtest.RejectAuth}, class: health.AuthRejected, stage: health.StageProxyAuth, wantStatus: 407},
		{name: "wrong password 407", badPass: true, class: health.AuthRejected, stage: health.StageProxyAuth, wantStatus: 407},
		{name: "no credentials 407", noCreds: true, class: health.AuthRejected, stage: health.StageProxyAuth, wantStatus: 407},
		{name: "tinyproxy 401", mode: status(401, "Unauthorized", "WWW-Authenticate", `Basic realm="tinyproxy"`), class: health.AuthRejected, stage: health.StageProxyAuth, wantStatus: 401},
		{name: "squid refused", mode: status(503, "", "X-Squid-Error", "ERR_CONNECT_FAIL 111"), class: health.TargetUnreachable, stage: health.StageTargetConnect, wantStatus: 503},
		{name: "squid timeout", mode: status(503, "", "X-Squid-Error", "ERR_CONNECT_FAIL 110"), class: health.TargetTimeout, stage: health.StageTargetConnect, wantStatus: 503},
		{name: "squid no route 502", mode: status(502, "", "X-Squid-Error", "ERR_CONNECT_FAIL 113"), class: health.TargetUnreachable, stage: health.StageTargetConnect, wantStatus: 502},
		{name: "squid dns", mode: status(503, "", "X-Squid-Error", "ERR_DNS_FAIL 0"), class: health.TargetUnreachable, stage: health.StageTargetConnect, wantStatus: 503},
		{name: "squid access denied 403", mode: status(403, "", "X-Squid-Error", "ERR_ACCESS_DENIED 0"), class: health.UpstreamError, stage: health.StageProxyHandshake, wantStatus: 403},
		{name: "squid other error 503", mode: status(503, "", "X-Squid-Error", "ERR_SHUTTING_DOWN 0"), class: health.UpstreamError, stage: health.StageTargetConnect, wantStatus: 503},
		{name: "tinyproxy unable to connect", mode: status(500, "Unable to connect"), class: health.TargetUnreachable, stage: health.StageTargetConnect, wantStatus: 500},
		{name: "500 internal", mode: status(500, ""), class: health.UpstreamError, stage: health.StageTargetConnect, wantStatus: 500},
		{name: "502 bare", mode: status(502, ""), class: health.UpstreamError, stage: health.StageTargetConnect, wantStatus: 502},
		{name: "503 bare", mode: status(503, ""), class: health.UpstreamError, stage: health.StageTargetConnect, wantStatus: 503},
		{name: "504", mode: status(504, ""), class: health.TargetTimeout, stage: health.StageTargetConnect, wantStatus: 504},
		{name: "403", mode: status(403, ""), class: health.UpstreamError, stage: health.StageProxyHandshake, wantStatus: 403},
		{name: "429", mode: status(429, ""), class: health.UpstreamError, stage: health.StageProxyHandshake, wantStatus: 429},
		{name: "302", mode: status(302, ""), class: health.UpstreamError, stage: health.StageProxyHandshake, wantStatus: 302},
		// The client's URL is at fault: reported to no record (ClassNone).
		{name: "squid invalid url 400", mode: status(400, "", "X-Squid-Error", "ERR_INVALID_URL 0"), class: health.ClassNone, stage: health.StageProxyHandshake, wantStatus: 400},
		{name: "target port closed", addr: closed, class: health.TargetUnreachable, stage: health.StageTargetConnect, wantStatus: 503},
	}
	cfg := testCfg()
	cfg.HandshakeTimeout = 200 * time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fk := upstreamtest.NewHTTPProxy(t, auth)
			fk.SetMode(tt.mode)
			u := fk.URL()
			if tt.badPass {
				u.User = urlUser("u", "wrong")
			}
			if tt.noCreds {
				u.User = nil
			}
			addr := tt.addr
			if addr == "" {
				addr = target.Addr()
			}
			_, err := dial(t, mustDialer(t, u, rowCfg(cfg, tt.class, tt.mode)), addr)
			f := wantFailure(t, err, tt.class, tt.stage)
			if f.Target != "127.0.0.1" {
				t.Errorf("Target = %q", f.Target)
			}
			var ce *ConnectStatusError
			if got := errors.As(err, &ce); got != (tt.wantStatus != 0) || got && ce.StatusCode != tt.wantStatus {
				t.Errorf("ConnectStatusError = %+v, want status %d", ce, tt.wantStatus)
			}
		})
	}
}

func TestHTTPSProxyTLSFailure(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	tlsFake := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{TLS: true})
	plainFake := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	t.Run("untrusted certificate", func(t *testing.T) {
		_, err := dial(t, mustDialer(t, tlsFake.URL(), testCfg()), target.Addr())
		wantFailure(t, err, health.UpstreamError, health.StageProxyHandshake)
	})
	t.Run("wrong SNI", func(t *testing.T) {
		cfg := testCfg()
		cfg.TLS = tlsFake.ClientTLS()
		cfg.TLS.ServerName = "not-the-proxy.example"
		_, err := dial(t, mustDialer(t, tlsFake.URL(), cfg), target.Addr())
		wantFailure(t, err, health.UpstreamError, health.StageProxyHandshake)
	})
	t.Run("plain HTTP proxy", func(t *testing.T) {
		u := plainFake.URL()
		u.Scheme = "https"
		_, err := dial(t, mustDialer(t, u, testCfg()), target.Addr())
		wantFailure(t, err, health.UpstreamError, health.StageProxyHandshake)
	})
	t.Run("black hole", func(t *testing.T) {
		tlsFake.SetMode(upstreamtest.Mode{Fault: upstreamtest.BlackHole})
		cfg := testCfg()
		cfg.HandshakeTimeout = 150 * time.Millisecond
		_, err := dial(t, mustDialer(t, tlsFake.URL(), cfg), target.Addr())
		wantFailure(t, err, health.Timeout, health.StageProxyHandshake)
	})
}

func TestReadConnectResponse(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		over      string
		status    int
		squid     string
		malformed bool
	}{
		{name: "squid 200", in: "HTTP/1.1 200 Connection established\r\n\r\n"},
		{name: "tinyproxy 1.0", in: "HTTP/1.0 200 Connection established\r\nProxy-agent: tinyproxy/1.11.1\r\n\r\n"},
		{name: "over-read", in: "HTTP/1.1 200 OK\r\n\r\nSSH-2.0-x\r\n", over: "SSH-2.0-x\r\n"},
		{name: "407", in: "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\nX-Squid-Error: ERR_CACHE_ACCESS_DENIED 0\r\n\r\n", status: 407, squid: "ERR_CACHE_ACCESS_DENIED 0"},
		{name: "503 with body", in: "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nhello", status: 503},
		{name: "garbage", in: "\x05\x00\x00\x01", malformed: true},
		{name: "empty", in: "", malformed: true},
		{name: "bad status", in: "HTTP/1.1 abc OK\r\n\r\n", malformed: true},
		{name: "header too large", in: "HTTP/1.1 200 OK\r\nX: " + strings.Repeat("a", maxConnectResponseBytes) + "\r\n\r\n", malformed: true},
		{name: "endless headers", in: "HTTP/1.1 200 OK\r\n" + strings.Repeat("X-A: b\r\n", 5000), malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			over, err := readConnectResponse(strings.NewReader(tt.in))
			var ce *ConnectStatusError
			switch {
			case tt.malformed:
				if !errors.Is(err, ErrMalformedReply) {
					t.Fatalf("err = %v, want ErrMalformedReply", err)
				}
			case tt.status != 0:
				if !errors.As(err, &ce) || ce.StatusCode != tt.status || ce.SquidError != tt.squid {
					t.Fatalf("err = %#v, want status %d squid %q", err, tt.status, tt.squid)
				}
			default:
				if err != nil || string(over) != tt.over {
					t.Fatalf("over = %q, %v; want %q", over, err, tt.over)
				}
			}
		})
	}
}

func TestConnectRequestRendering(t *testing.T) {
	d := &connectDialer{proxyDialer: proxyDialer{user: "Aladdin", pass: "open sesame", hasAuth: true}}
	got := d.request("example.com:443")
	want := "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n\r\n"
	if got != want {
		t.Fatalf("request = %q, want %q", got, want)
	}
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(got)))
	if err != nil || req.Method != "CONNECT" || req.Host != "example.com:443" {
		t.Fatalf("not a valid CONNECT: %v %+v", err, req)
	}
	d.hasAuth = false
	if got := d.request("[::1]:443"); got != "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n\r\n" {
		t.Fatalf("no auth: %q", got)
	}
}

func BenchmarkReadConnectResponse(b *testing.B) {
	msg := "HTTP/1.1 200 Connection established\r\nVia: 1.1 squid\r\n\r\n"
	r := strings.NewReader(msg)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(msg)
		if _, err := readConnectResponse(r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestHTTPSProxyHangAfterTLS: a proxy that completed TLS is alive; no
// answer to the CONNECT then is the target's timeout, with a budget of
// its own after the TLS handshake.
func TestHTTPSProxyHangAfterTLS(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	fk := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{TLS: true, Mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}})
	cfg := testCfg()
	cfg.TLS = fk.ClientTLS()
	cfg.HandshakeTimeout = 300 * time.Millisecond
	_, err := dial(t, mustDialer(t, fk.URL(), cfg), target.Addr())
	wantFailure(t, err, health.TargetTimeout, health.StageTargetConnect)
	if code, ok := TargetReplyCode(err); code != 6 || !ok {
		t.Errorf("TargetReplyCode = %d, %v; want 6 (TTL expired)", code, ok)
	}
}

// TestConnectRefusesInjection: a target host that would break the request
// line or inject a header is refused before anything is written to the
// proxy, with an error that is the client's fault (issue: CR/LF from a
// client went verbatim into "CONNECT host:port HTTP/1.1" and Host, and
// tinyproxy's 407 answer then cooled the upstream as auth_rejected).
func TestConnectRefusesInjection(t *testing.T) {
	fk := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Username: "u", Password: "p"})
	d := mustDialer(t, fk.URL(), testCfg())
	for _, addr := range []string{
		"evil.example\r\nProxy-Authorization: Basic eDp5:443",
		"evil.example\r\n\r\nGET / HTTP/1.1:443",
		"a b.example:443",
		"a\x00b.example:443",
		"a/b.example:443",
	} {
		_, err := d.DialContext(context.Background(), "tcp", addr)
		if !errors.Is(err, ErrInvalidTarget) || !ClientFault(err) {
			t.Errorf("%q: err = %v, want ErrInvalidTarget", addr, err)
		}
		if strings.ContainsAny(fmt.Sprint(err), "\r\n\x00") {
			t.Errorf("%q: the error carries raw control bytes: %q", addr, err)
		}
	}
	if n := fk.Connections(); n != 0 {
		t.Errorf("the proxy saw %d connections, want none", n)
	}
}
