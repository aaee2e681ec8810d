package gateway

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

// silentSOCKS opens n connections to the SOCKS5 front that send nothing
// (the last sends half a greeting), and returns once the front has
// accepted them: a later client is answered, and accepts are in order.
func silentSOCKS(t *testing.T, srv *Server, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", srv.Addr("socks5"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	if _, err := cs[n-1].Write([]byte{5, 2, 0}); err != nil {
		t.Fatal(err)
	}
	if rep, err := selfCheckSOCKS(t, srv); err != nil || rep != repNotAllowed {
		t.Fatalf("a SOCKS5 client after the silent ones: rep %#x err %v, want 0x02", rep, err)
	}
	return cs
}

// shutdownIn runs Shutdown(ctx) and returns a channel closed when it
// returned.
func shutdownIn(srv *Server, ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Shutdown(ctx) }() // owner: the test; ends with Shutdown
	return done
}

// TestShutdownClosesSOCKSHandshakes: SOCKS5 clients that never finish
// their handshake are closed when the drain begins; with no tunnel open
// Shutdown returns at once, whatever listen.handshake_timeout is, and a
// second signal (the ctx cancelled) ends a drain that tunnels hold.
// Issue: Shutdown waited for each silent client's handshake deadline
// (exit after 19.5 s with shutdown_grace 3 s, a second SIGTERM too).
func TestShutdownClosesSOCKSHandshakes(t *testing.T) {
	conf := "allow_private_destinations = true\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nhandshake_timeout = \"3m\"\n"
	// Far below handshake_timeout, far above any slow machine's drain.
	const bound = time.Minute
	closedSoon := func(t *testing.T, cs []net.Conn) {
		t.Helper()
		for i, c := range cs {
			if b, closed := readToClose(c, bound); !closed || len(b) > 0 {
				t.Errorf("silent client %d: closed %v, read %x; want closed with no answer", i, closed, b)
			}
		}
	}
	t.Run("no tunnel", func(t *testing.T) {
		srv, logs := newGateway(t, "drain.toml", conf)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		cs := silentSOCKS(t, srv, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done := shutdownIn(srv, ctx)
		closedSoon(t, cs)
		select {
		case <-done:
		case <-time.After(bound):
			t.Fatalf("Shutdown still waiting %v after it began, no tunnel open", bound)
		}
		if strings.Contains(logs.String(), "handshake failed") {
			t.Errorf("handshakes the drain closed were logged as failed:\n%s", logs)
		}
	})
	t.Run("second signal", func(t *testing.T) {
		srv, logs := newGateway(t, "drain.toml", conf)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		tunnel := drainTunnel(t, srv.Addr("http"), drainTarget(t))
		cs := silentSOCKS(t, srv, 3)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		done := shutdownIn(srv, ctx)
		closedSoon(t, cs)
		select {
		case <-done:
			t.Fatal("Shutdown returned with a tunnel open and its ctx alive")
		default:
		}
		cancel()
		select {
		case <-done:
		case <-time.After(bound):
			t.Fatalf("Shutdown still waiting %v after its ctx was cancelled\n%s", bound, logs)
		}
		if _, closed := readToClose(tunnel, bound); !closed {
			t.Error("the open tunnel was not closed")
		}
	})
}
