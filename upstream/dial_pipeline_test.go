package upstream

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// answerAfterAll is a SOCKS5 server that answers nothing until it has read
// the whole pipelined handshake (greeting, credentials when user is set,
// IPv4 CONNECT), then answers every step at once and relays to the target. A client that
// waits for the method reply before sending more never gets one.
func answerAfterAll(t *testing.T, user, pass string) string {
	t.Helper()
	want := []byte{5, 1, 0}
	reply := []byte{5, 0}
	if user != "" {
		want = append([]byte{5, 1, 2, 1, byte(len(user))}, user...)
		want = append(append(want, byte(len(pass))), pass...)
		reply = []byte{5, 2, 1, 0}
	}
	return serveConns(t, func(c net.Conn) {
		got := make([]byte, len(want)+10) // + VER CMD RSV ATYP IPv4 PORT
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got[:len(want)], want) {
			return
		}
		r := got[len(want):]
		dst, err := net.Dial("tcp", netip.AddrPortFrom(netip.AddrFrom4([4]byte(r[4:8])), uint16(r[8])<<8|uint16(r[9])).String())
		if err != nil {
			return
		}
		defer dst.Close()
		_, _ = c.Write(append(reply, 5, 0, 0, 1, 127, 0, 0, 1, 0, 80))
		go func() { _, _ = io.Copy(dst, c) }()
		_, _ = io.Copy(c, dst)
	})
}

// dropsTheRest reads the greeting with one large read, answers the method
// and then waits for a request it already threw away (microsocks).
func dropsTheRest(t *testing.T) string {
	t.Helper()
	return serveConns(t, func(c net.Conn) {
		buf := make([]byte, 1024)
		if _, err := c.Read(buf); err != nil {
			return
		}
		_, _ = c.Write([]byte{5, 0})
		_, _ = c.Read(buf) // the request never comes again
	})
}

// serveConns runs handle for each connection to a new loopback listener
// (closed, with its 5 s deadline, when handle returns) until t ends.
func serveConns(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				handle(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestSOCKS5Pipeline(t *testing.T) {
	// Rows that expect an answer get 5 s (CI under load); rows that expect
	// a deadline get less.
	pipelined := testCfg()
	pipelined.SOCKS5Pipeline = true
	pipelined.HandshakeTimeout = 5 * time.Second
	plain := pipelined
	plain.SOCKS5Pipeline = false
	plain.HandshakeTimeout = 500 * time.Millisecond
	pipelinedShort := pipelined
	pipelinedShort.HandshakeTimeout = 1500 * time.Millisecond
	target := upstreamtest.NewTarget(t).Addr()

	for _, tt := range []struct {
		name       string
		user, pass string
	}{{"no auth", "", ""}, {"credentials", "u", "p:w@d"}} {
		t.Run(tt.name, func(t *testing.T) {
			addr := answerAfterAll(t, tt.user, tt.pass)
			u := &url.URL{Scheme: "socks5", Host: addr}
			if tt.user != "" {
				u.User = url.UserPassword(tt.user, tt.pass)
			}
			c, err := dial(t, mustDialer(t, u, pipelined), target)
			if err != nil {
				t.Fatalf("pipelined: %v", err)
			}
			roundTrip(t, c)
			// The same server with a step-by-step client: no answer to the
			// lone greeting, so the test tells the two apart.
			if _, err := dial(t, mustDialer(t, u, plain), target); err == nil {
				t.Fatal("step by step: succeeded against a server that answers only a whole pipelined handshake")
			}
		})
	}

	t.Run("server drops what follows the greeting", func(t *testing.T) {
		u := &url.URL{Scheme: "socks5", Host: dropsTheRest(t)}
		_, err := dial(t, mustDialer(t, u, pipelinedShort), target)
		var f *health.Failure
		if !errors.As(err, &f) || f.Class != health.Timeout || f.Stage != health.StageProxyHandshake ||
			!strings.Contains(err.Error(), "may not accept pipeline = true") {
			t.Fatalf("err = %v; want a proxy_handshake timeout naming pipeline", err)
		}
	})

	t.Run("wrong password", func(t *testing.T) {
		addr := serveConns(t, func(c net.Conn) { // method 02, then status 1
			_, _ = c.Write([]byte{5, 2, 1, 1})
			_, _ = io.Copy(io.Discard, c)
		})
		u := &url.URL{Scheme: "socks5", Host: addr, User: url.UserPassword("u", "secret-pw")}
		_, err := dial(t, mustDialer(t, u, pipelined), target)
		var f *health.Failure
		if !errors.As(err, &f) || f.Class != health.AuthRejected || strings.Contains(err.Error(), "secret-pw") {
			t.Fatalf("err = %v; want auth_rejected without the password", err)
		}
	})

	t.Run("only for socks5", func(t *testing.T) {
		for _, raw := range []string{"http://127.0.0.1:3128", "https://127.0.0.1:3128"} {
			u, _ := url.Parse(raw)
			if _, err := NewDialer(u, pipelined); err == nil || !strings.Contains(err.Error(), "pipeline applies to socks5 upstreams only") {
				t.Errorf("%s with pipeline: %v", raw, err)
			}
		}
	})
}
