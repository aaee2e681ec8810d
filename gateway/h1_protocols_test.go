package gateway

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestH1OtherProtocolsRefusedAtOnce: a SOCKS5 client on the HTTP port gets
// 05 FF (no acceptable methods) and a TLS client (curl -x https://) is
// closed, both at once, with a debug line naming what happened and a
// handshake_error count (bug: both waited out listen.handshake_timeout
// for a request head, then got a "408 request head incomplete" neither
// could read). The handshake timeout here is a minute, the clients'
// patience 10 s: an answer only at the timeout fails the test.
func TestH1OtherProtocolsRefusedAtOnce(t *testing.T) {
	srv, logs := startGateway(t, "allow_private_destinations = true\n"+
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nhandshake_timeout = \"1m\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")

	t.Run("SOCKS5 greeting", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		if _, err := c.Write([]byte{5, 2, 0, 2}); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(br)
		if err != nil {
			t.Fatalf("after %q: %v, want 05 FF and a close", got, err)
		}
		if !bytes.Equal(got, []byte{5, 0xFF}) {
			t.Fatalf("answer %q, want 05 FF (no acceptable methods)", got)
		}
		want := "SOCKS5 client on the HTTP port: use listen.socks5 " + srv.Addr("socks5")
		eventuallyTrue(t, "the debug line "+want, func() bool { return strings.Contains(logs.String(), want) })
	})

	t.Run("SOCKS4 request", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		if _, err := c.Write([]byte{4, 1, 0, 80, 127, 0, 0, 1, 0}); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(br)
		if err != nil || len(got) != 8 || got[0] != 0 || got[1] != 91 {
			t.Fatalf("answer %q (%v), want a SOCKS4 reject (00 5B …) and a close", got, err)
		}
		want := "SOCKS4 client on the HTTP port"
		eventuallyTrue(t, "the debug line "+want, func() bool { return strings.Contains(logs.String(), want) })
	})

	t.Run("TLS ClientHello", func(t *testing.T) {
		c, _ := h1Dial(t, srv)
		rc := &readCount{Conn: c}
		tc := tls.Client(rc, &tls.Config{ServerName: "rotor.test", InsecureSkipVerify: true})
		err := tc.Handshake()
		var ne net.Error
		if err == nil || (errors.As(err, &ne) && ne.Timeout()) || rc.n != 0 {
			t.Fatalf("TLS handshake: %v after %d bytes from rotor, want the connection closed at once", err, rc.n)
		}
		want := "TLS client on the HTTP port: it speaks plain HTTP (a proxy URL http://, not https://)"
		eventuallyTrue(t, "the debug line "+want, func() bool { return strings.Contains(logs.String(), want) })
	})

	var m dto.Metric
	if err := srv.metrics.tunnelsTotal.WithLabelValues("http", "handshake_error").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 3 {
		t.Errorf(`rotor_tunnels_total{front="http",outcome="handshake_error"} = %v, want 3`, got)
	}

	// Only a connection's first byte says what it speaks: the same byte
	// after a request on a kept-alive connection is a malformed request.
	t.Run("after a request", func(t *testing.T) {
		target := upstreamtest.NewTarget(t)
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target.URL("/ok"), target.Addr())
		if r, b := h1Read(t, br, "GET"); r.StatusCode != 200 || b != "ok\n" {
			t.Fatalf("first request: %d %q", r.StatusCode, b)
		}
		fmt.Fprint(c, "\x05\x01\x00\r\n\r\n")
		if r, b := h1Read(t, br, "GET"); r.StatusCode != 400 || !strings.Contains(b, "malformed") {
			t.Fatalf("SOCKS5 bytes after a request: %d %q, want a 400", r.StatusCode, b)
		}
	})
}

// TestH1SOCKS5PortOff: with no SOCKS5 port, the line says so rather than
// naming an address.
func TestH1SOCKS5PortOff(t *testing.T) {
	srv, logs := startGateway(t, "allow_private_destinations = true\n"+
		"[listen]\nsocks5 = \"\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nhandshake_timeout = \"1m\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	c, br := h1Dial(t, srv)
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(br); err != nil || !bytes.Equal(got, []byte{5, 0xFF}) {
		t.Fatalf("answer %q, %v, want 05 FF and a close", got, err)
	}
	want := "SOCKS5 client on the HTTP port: rotor's SOCKS5 port is off (listen.socks5)"
	eventuallyTrue(t, "the debug line "+want, func() bool { return strings.Contains(logs.String(), want) })
}

// readCount counts the bytes read from its conn.
type readCount struct {
	net.Conn
	n int
}

func (c *readCount) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += n
	return n, err
}
