package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// shortLinger stands the half-close default (60 s) in for d for one test.
func shortLinger(t *testing.T, d time.Duration) {
	t.Helper()
	setHalfCloseLinger(d)
	t.Cleanup(func() { setHalfCloseLinger(60 * time.Second) })
}

// halfCloseWrite shuts down the client's sending side (shutdown(SHUT_WR)).
func halfCloseWrite(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
}

// A client that sends its request, then shuts down its sending side, and
// whose target answers after a silence longer than the half-close default
// but within tunnel_idle_timeout gets its answer: the bound on a
// half-closed tunnel's silence follows tunnel_idle_timeout when that is
// set. It was the fixed 60 s whatever tunnel_idle_timeout said, so an
// answer after 65 s was lost (logged ok).
func TestHalfClosedTunnelWaitsTunnelIdleTimeout(t *testing.T) {
	shortLinger(t, 300*time.Millisecond)
	for _, kind := range []string{"direct", "socks5", "https"} {
		t.Run(kind, func(t *testing.T) {
			ht := newHeldTarget(t)
			srv, logs := resetGateway(t, kind, "tunnel_idle_timeout = \"20s\"\n")
			c, br := openTunnel(t, srv, "socks5", ht.addr)
			tc := ht.accept(t)
			if _, err := c.Write([]byte("ask")); err != nil {
				t.Fatal(err)
			}
			halfCloseWrite(t, c)
			got, err := io.ReadAll(tc)
			if err != nil || string(got) != "ask" {
				t.Fatalf("target read %q, %v; want the request, then the client's FIN", got, err)
			}
			time.Sleep(1500 * time.Millisecond) // 5 × the stand-in default, well within tunnel_idle_timeout
			if _, err := tc.Write([]byte("answer")); err != nil {
				t.Fatalf("the tunnel was cut before the target answered: %v", err)
			}
			tc.Close()
			answer, err := io.ReadAll(br)
			if string(answer) != "answer" {
				t.Fatalf("client read %q, %v; want the late answer", answer, err)
			}
			line := tunnelLine(t, logs)
			wantFields(t, line, `"outcome":"ok"`, `"bytes_down":6`)
			if strings.Contains(line, `"cut"`) {
				t.Errorf("summary line %s says the tunnel was cut", line)
			}
		})
	}
}

// The half-close bound still ends a half-closed tunnel whose target never
// answers (with tunnel_idle_timeout "never", at the default), and its
// line says so: cut half_closed after silent ms. Likewise a client that
// stays silent after the target finished. It was logged as any ok
// tunnel, indistinguishable from one that ended normally after 60 s.
func TestHalfClosedCutIsLogged(t *testing.T) {
	shortLinger(t, 300*time.Millisecond)
	for _, kind := range []string{"direct", "socks5", "https"} {
		for _, side := range []string{"client", "target"} {
			t.Run(kind+"/"+side+" finished", func(t *testing.T) {
				ht := newHeldTarget(t)
				srv, logs := resetGateway(t, kind, "tunnel_idle_timeout = \"0s\"\n")
				c, br, tc := establish(t, srv, "socks5", ht)
				if side == "client" {
					halfCloseWrite(t, c)
				} else {
					tc.Close()
					if _, err := br.ReadByte(); err != io.EOF {
						t.Fatalf("client read %v after the target closed, want EOF", err)
					}
				}
				tunnelsGone(t, srv, 15*time.Second, "a half-closed tunnel, silent")
				wantFields(t, tunnelLine(t, logs), `"outcome":"ok"`, `"cut":"half_closed"`, `"silent":300`)
			})
		}
	}
}

// tunnel_idle_timeout's cut is named too.
func TestIdleCutIsLogged(t *testing.T) {
	ht := newHeldTarget(t)
	srv, logs := resetGateway(t, "direct", "tunnel_idle_timeout = \"300ms\"\n")
	establish(t, srv, "socks5", ht)
	tunnelsGone(t, srv, 15*time.Second, "an idle tunnel")
	wantFields(t, tunnelLine(t, logs), `"outcome":"ok"`, `"cut":"idle"`, `"silent":300`)
}

// A tunnel whose stall was reported is still watched: when its client
// then half-closes and the target stays silent, the half-close bound ends
// it. The watchdog stopped checking at its next tick after the report, so
// such a tunnel lived as long as the target held it.
func TestStalledTunnelStillWatched(t *testing.T) {
	shortLinger(t, 400*time.Millisecond)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	held := make(chan net.Conn, 1)
	go func() { // owner: this test; answers one connection part-way, then reads and holds it
		c, err := ln.Accept()
		if err != nil {
			return
		}
		held <- c
		br := bufio.NewReader(c)
		if _, err := br.ReadString('\n'); err != nil {
			return
		}
		_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial"))
		_, _ = io.Copy(io.Discard, br) // to the client's FIN; the connection stays open
	}()
	t.Cleanup(func() {
		select {
		case c := <-held:
			c.Close()
		default:
		}
	})
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[slow_body]\nstall = \"300ms\"\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), up.URL().String()))
	c, br := rawSOCKS(t, srv.Addr("socks5"), ln.Addr().String(), []byte("GET / HTTP/1.1\r\n"))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the kernel's stamps are in jiffies
	if _, err := c.Write([]byte("more?")); err != nil {
		t.Fatal(err)
	}
	waitState(t, srv, "up", health.Cooling) // the stall was reported
	time.Sleep(500 * time.Millisecond)      // several of the watchdog's ticks (75 ms) after it
	halfCloseWrite(t, c)
	tunnelsGone(t, srv, 10*time.Second, "a stalled tunnel whose client half-closed")
}
