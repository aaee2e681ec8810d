package upstreamtest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// socksConnect is a minimal no-auth SOCKS5 client for testing the fake.
func socksConnect(t *testing.T, proxyAddr, target string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", proxyAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	host, port, _ := net.SplitHostPort(target)
	ip := net.ParseIP(host).To4()
	p, _ := net.LookupPort("tcp", port)
	msg := []byte{5, 1, 0, 5, 1, 0, 1}
	msg = append(msg, ip...)
	msg = append(msg, byte(p>>8), byte(p))
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	resp := make([]byte, 2+10)
	if _, err := io.ReadFull(c, resp); err != nil {
		t.Fatal(err)
	}
	if resp[1] != 0 || resp[3] != 0 {
		t.Fatalf("socks reply % x", resp)
	}
	return c
}

func get(t *testing.T, c net.Conn, path string) (*http.Response, *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, br
}

func TestTargetRoutes(t *testing.T) {
	CheckGoroutines(t)
	tg := NewTarget(t)
	for path, want := range map[string]int{"/ok": 200, "/status/429": 429, "/delay/1ms": 200, "/nope": 404} {
		resp, err := http.Get(tg.URL(path))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	resp, err := http.Post(tg.URL("/echo"), "text/plain", strings.NewReader("ping"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ping" {
		t.Fatalf("echo = %q", b)
	}
	if tg.Requests() != 5 {
		t.Fatalf("Requests() = %d", tg.Requests())
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestStallAfterAndFirstByteDelay(t *testing.T) {
	CheckGoroutines(t)
	tg := NewTarget(t)
	fk := NewSOCKS5(t, Options{Mode: Mode{StallAfter: 40}})
	c := socksConnect(t, fk.Addr(), tg.Addr())
	if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: t\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// 40 bytes of the response arrive, then nothing.
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	got, err := io.ReadAll(c)
	if !isTimeout(err) || len(got) != 40 {
		t.Fatalf("read after stall: %v, %d bytes %q", err, len(got), got)
	}

	fk.SetMode(Mode{FirstByteDelay: 150 * time.Millisecond})
	c2 := socksConnect(t, fk.Addr(), tg.Addr())
	start := time.Now()
	resp2, _ := get(t, c2, "/ok")
	if el := time.Since(start); el < 150*time.Millisecond || resp2.StatusCode != 200 {
		t.Fatalf("first byte after %v, status %d", el, resp2.StatusCode)
	}
	if fk.Tunnels() != 2 || fk.Connections() != 2 {
		t.Fatalf("counters: tunnels %d connections %d", fk.Tunnels(), fk.Connections())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestHTTPProxyForwardAndRefuseRecovery(t *testing.T) {
	CheckGoroutines(t)
	tg := NewTarget(t)
	fk := NewHTTPProxy(t, Options{Username: "u", Password: "p"})
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(fk.URL())}}
	defer client.CloseIdleConnections()
	resp, err := client.Get(tg.URL("/status/503"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || fk.Forwards() != 1 || tg.Requests() != 1 {
		t.Fatalf("status %d forwards %d requests %d", resp.StatusCode, fk.Forwards(), tg.Requests())
	}
	bad := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: fk.Addr()})}}
	defer bad.CloseIdleConnections()
	resp, err = bad.Get(tg.URL("/ok"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 407 || fk.AuthFailures() != 1 {
		t.Fatalf("no credentials: %d, auth failures %d", resp.StatusCode, fk.AuthFailures())
	}

	fk.SetMode(Mode{Fault: Refuse})
	if _, err := net.Dial("tcp", fk.Addr()); err == nil {
		t.Fatal("refusing fake accepted a connection")
	}
	fk.SetMode(Mode{})
	c, err := net.Dial("tcp", fk.Addr())
	if err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	c.Close()
}

func TestClosedPort(t *testing.T) {
	if _, err := net.Dial("tcp", ClosedPort(t)); err == nil {
		t.Fatal("ClosedPort accepted a connection")
	}
}
