package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/net/proxy"
)

// logBuffer collects log output for assertions (redaction tests).
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// newGateway builds (does not start) a Server from TOML text named file,
// logging into the returned buffer.
func newGateway(t *testing.T, file, text string) (*Server, *logBuffer) {
	t.Helper()
	cfg, err := ParseConfig(file, []byte(text))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logs := &logBuffer{}
	srv, err := New(cfg, Options{Log: zerolog.New(logs)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv, logs
}

// startGateway starts a Server from TOML text with every front on
// 127.0.0.1:0 unless the text sets [listen] itself.
func startGateway(t *testing.T, text string) (*Server, *logBuffer) {
	t.Helper()
	if !strings.Contains(text, "[listen]") {
		text += "\n[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"
	}
	srv, logs := newGateway(t, "test.toml", text)
	serve(t, srv)
	return srv, logs
}

// serve starts srv and shuts it down (bounded) when the test ends.
func serve(t *testing.T, srv *Server) {
	t.Helper()
	if err := srv.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
}

// socksGet fetches rawURL through the SOCKS5 front with optional auth.
func socksGet(t *testing.T, front, user, pass, rawURL string) (*http.Response, error) {
	t.Helper()
	var auth *proxy.Auth
	if user != "" {
		auth = &proxy.Auth{User: user, Password: pass}
	}
	d, err := proxy.SOCKS5("tcp", front, auth, &net.Dialer{Timeout: 5 * time.Second})
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext, DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return readAll(c.Get(rawURL))
}

// httpGet fetches rawURL through the HTTP front: plain forwarding, or a
// CONNECT tunnel when tunnel is true.
func httpGet(t *testing.T, front, user, pass, rawURL string, tunnel bool) (*http.Response, error) {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: front}
	if user != "" {
		pu.User = url.UserPassword(user, pass)
	}
	if tunnel {
		return connectGet(front, user, pass, rawURL)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return readAll(c.Get(rawURL))
}

// connectGet opens a CONNECT tunnel by hand (so the test sees the 200's
// headers) and sends one GET through it.
func connectGet(front, user, pass, rawURL string) (*http.Response, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	auth := ""
	if user != "" {
		auth = "Proxy-Authorization: Basic " + basic(user, pass) + "\r\n"
	}
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", u.Host, u.Host, auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		return resp, nil
	}
	upstreamName := resp.Header.Get("X-Rotor-Upstream")
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", u.RequestURI(), u.Host)
	inner, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	inner.Header.Set("X-Rotor-Upstream", upstreamName)
	return readAll(inner, nil)
}

func basic(user, pass string) string {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth(user, pass)
	return strings.TrimPrefix(r.Header.Get("Authorization"), "Basic ")
}

// readAll buffers the body so callers may inspect it after the transport
// is gone.
func readAll(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(strings.NewReader(string(b)))
	return resp, nil
}

func bodyOf(resp *http.Response) string {
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// socksConnect performs a raw SOCKS5 no-auth CONNECT to addr and returns
// the reply code, for asserting exact RFC 1928 replies.
func socksConnect(t *testing.T, front, addr string) byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	host, portStr, _ := net.SplitHostPort(addr)
	var port int
	fmt.Sscan(portStr, &port)
	req := []byte{5, 1, 0}
	req = append(req, 5, 1, 0, 3, byte(len(host)))
	req = append(req, host...)
	req = append(req, byte(port>>8), byte(port))
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(c, buf[:2]); err != nil {
		t.Fatalf("greeting reply: %v", err)
	}
	if _, err := io.ReadFull(c, buf[:4]); err != nil {
		t.Fatalf("connect reply: %v", err)
	}
	return buf[1]
}

// watch runs srv.Watch until the test ends (then shuts srv down) and
// returns the channel its SIGHUPs arrive on.
func watch(t *testing.T, srv *Server) chan<- os.Signal {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	watching := make(chan struct{})
	go func() { defer close(watching); srv.Watch(ctx, hup) }() // owner: the test; ends at its cleanup
	t.Cleanup(func() {
		cancel()
		<-watching
		_ = srv.Shutdown(context.Background())
	})
	return hup
}

// watchedFile loads the config file at path, builds a Server logging into
// the returned buffer, starts it when start is set, and runs its Watch
// until the test ends (see watch).
func watchedFile(t *testing.T, path string, start bool) (*Server, *logBuffer, chan<- os.Signal) {
	t.Helper()
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	srv, err := New(cfg, Options{Log: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	if start {
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
	}
	return srv, logs, watch(t, srv)
}
