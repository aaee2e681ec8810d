package gateway

import (
	"context"
	"io"
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

// TestShutdownForceClosedTunnelsLogged: when the grace runs out, the open
// tunnels are counted once in one line, and each tunnel's own line says
// the drain ended it (outcome shutdown, at info). Issue: a second pass
// counted a tunnel still closing again ("closing open tunnels" twice,
// tunnels:10 then tunnels:1), and each line said outcome ok.
func TestShutdownForceClosedTunnelsLogged(t *testing.T) {
	srv, logs := newGateway(t, "drain.toml", drainConf)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	target := drainTarget(t)
	const n = 10
	var tunnels []net.Conn
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			tunnels = append(tunnels, drainTunnel(t, srv.Addr("http"), target))
			continue
		}
		c, err := net.DialTimeout("tcp", srv.Addr("socks5"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(socksHello("", "", target)); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 12)
		if _, err := io.ReadFull(c, b); err != nil || b[3] != repSuccess {
			t.Fatalf("SOCKS tunnel: %x %v", b, err)
		}
		_ = c.SetDeadline(time.Time{})
		tunnels = append(tunnels, c)
	}
	// A front answers its client just before it registers the tunnel.
	eventually(t, "tunnels registered", func() bool { return srv.tunnels.count() == n })
	ctx, cancel := context.WithDeadline(context.Background(), time.Now()) // the grace is over
	defer cancel()
	_ = srv.Shutdown(ctx)
	for i, c := range tunnels {
		if _, closed := readToClose(c, time.Minute); !closed {
			t.Errorf("tunnel %d not closed", i)
		}
	}
	out := logs.String()
	if got := strings.Count(out, "closing open tunnels"); got != 1 || !strings.Contains(out, `"tunnels":10,"message":"shutdown grace over: closing open tunnels"`) {
		t.Errorf("%d drain lines, want one with tunnels:10:\n%s", got, out)
	}
	var closed int
	drainLine := false
	for _, l := range strings.Split(out, "\n") {
		drainLine = drainLine || strings.Contains(l, "closing open tunnels")
		if !strings.Contains(l, `"message":"tunnel closed"`) {
			continue
		}
		closed++
		if !drainLine {
			t.Errorf("a tunnel the drain closed is logged before the drain's line: %s", l)
		}
		if !strings.Contains(l, `"outcome":"shutdown"`) || !strings.Contains(l, `"level":"info"`) {
			t.Errorf("a tunnel the drain closed: %s; want outcome shutdown at info", l)
		}
	}
	if closed != n {
		t.Errorf("%d tunnel lines, want %d:\n%s", closed, n, out)
	}
}

// TestRegistryClosesEachTunnelOnce: a second closeAll neither closes nor
// counts a tunnel the first one closed that has not ended yet, and remove
// tells the tunnel the drain ended it.
func TestRegistryClosesEachTunnelOnce(t *testing.T) {
	var r registry
	closes := map[uint64]int{}
	for id := uint64(1); id <= 3; id++ {
		r.add(id, func() { closes[id]++ })
	}
	if n := r.closeAll(); n != 3 {
		t.Fatalf("first closeAll = %d, want 3", n)
	}
	r.add(4, func() { closes[4]++ }) // opened after the first pass
	if n := r.closeAll(); n != 1 {
		t.Errorf("second closeAll = %d, want 1 (only the tunnel opened since)", n)
	}
	for id := uint64(1); id <= 4; id++ {
		if closes[id] != 1 {
			t.Errorf("tunnel %d closed %d times, want once", id, closes[id])
		}
		if !r.remove(id) {
			t.Errorf("remove(%d) = false, want true: the drain closed it", id)
		}
	}
	r.add(5, func() {})
	if r.remove(5) {
		t.Error("remove of a tunnel that ended by itself = true")
	}
}
