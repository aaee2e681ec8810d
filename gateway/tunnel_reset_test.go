package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/internal/splice"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// heldTarget accepts connections and hands each to the test, which
// decides what the target says and when it closes.
type heldTarget struct {
	addr  string
	conns chan net.Conn
}

func newHeldTarget(t *testing.T) *heldTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ht := &heldTarget{addr: ln.Addr().String(), conns: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() { // owner: this test; ends when the listener closes at cleanup
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			ht.conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(ht.conns)
		for c := range ht.conns {
			c.Close()
		}
	})
	return ht
}

// accept returns the target's side of the next tunnel.
func (ht *heldTarget) accept(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-ht.conns:
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("the target was never connected")
		return nil
	}
}

// resetGateway starts a gateway over one upstream "up" of kind direct,
// socks5 (both pumped tunnels) or https (the classic relay), logging into
// the returned buffer; extra goes at the top of the config.
func resetGateway(t *testing.T, kind, extra string) (*Server, *logBuffer) {
	t.Helper()
	probe := upstreamtest.NewTarget(t)
	conf := extra + fmt.Sprintf("allow_private_destinations = true\n%s\n[pool]\nstart_eligible = true\nmax_attempts = 1\n", probeConf(probe))
	var opts Options
	switch kind {
	case "direct":
		conf += "[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n"
	case "socks5":
		up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
		conf += fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL().String())
	case "https":
		up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{TLS: true})
		conf += fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL().String())
		opts.UpstreamTLS = up.ClientTLS()
	default:
		t.Fatalf("unknown upstream kind %q", kind)
	}
	logs := &logBuffer{}
	opts.Log = zerolog.New(logs)
	return startGatewayOpts(t, conf, opts), logs
}

// establish opens a tunnel to ht through front, exchanges a few bytes each
// way and returns the client's and the target's sides.
func establish(t *testing.T, srv *Server, front string, ht *heldTarget) (net.Conn, *bufio.Reader, net.Conn) {
	t.Helper()
	c, br := openTunnel(t, srv, front, ht.addr)
	tc := ht.accept(t)
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(tc, buf); err != nil {
		t.Fatalf("target read: %v", err)
	}
	if _, err := tc.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("client read: %v", err)
	}
	eventually(t, "tunnel registered", func() bool { return srv.tunnels.count() == 1 })
	return c, br, tc
}

// resetClose closes c with a reset (SO_LINGER 0), as clients and servers
// that abort a connection do.
func resetClose(t *testing.T, c net.Conn) {
	t.Helper()
	if err := c.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// tunnelsGone waits for every tunnel to end, for up to within: the
// half-close bound these tests leave at its 60 s default is far beyond.
func tunnelsGone(t *testing.T, srv *Server, within time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for srv.tunnels.count() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: the tunnel is still open %v later", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tunnelLine waits for the tunnel's summary line and returns it.
func tunnelLine(t *testing.T, logs *logBuffer) string {
	t.Helper()
	line := ""
	waitFor(t, func() bool {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, `"message":"tunnel closed"`) {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

func wantFields(t *testing.T, line string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(line, w) {
			t.Errorf("summary line %s lacks %s", line, w)
		}
	}
}

// A client that resets its tunnel (SO_LINGER 0, then close) to a quiet
// target has left: the tunnel ends at once, the target sees the reset
// (on the direct upstream; a proxy relays it as it likes), and the line
// says client_gone. rotor took the reset for a half-close: it sent a FIN
// upstream and held the tunnel (2 fds, the connection-limit slot, the
// upstream's max_conns slot) for the 60 s linger, then logged ok.
func TestTunnelClientResetEndsTunnel(t *testing.T) {
	for _, kind := range []string{"direct", "socks5", "https"} {
		for _, front := range []string{"socks5", "http"} {
			t.Run(kind+"/"+front, func(t *testing.T) {
				ht := newHeldTarget(t)
				srv, logs := resetGateway(t, kind, "")
				c, _, tc := establish(t, srv, front, ht)
				time.Sleep(2 * splice.LingerWait) // the quiet directions park in the reactor
				resetClose(t, c)
				tunnelsGone(t, srv, 15*time.Second, "the client reset")
				if kind == "direct" {
					_, err := tc.Read(make([]byte, 1))
					if !errors.Is(err, syscall.ECONNRESET) {
						t.Errorf("the target read %v, want the client's reset passed on (ECONNRESET)", err)
					}
				}
				wantFields(t, tunnelLine(t, logs), `"outcome":"client_gone"`, `"reset":"client"`, `"level":"info"`)
			})
		}
	}
}

// A target that resets its connection: the client gets a reset too, as
// from a direct connection, and the tunnel ends although the client says
// nothing. rotor sent the client a FIN (a clean end, where the answer may
// have been cut short) and held the tunnel until the client wrote or 60 s
// passed. Through a proxy upstream the proxy decides what the client sees
// (the fakes relay a FIN), so this is the direct upstream's case. The
// tunnel itself was served: outcome ok, with the reset named.
func TestTunnelUpstreamResetReachesClient(t *testing.T) {
	for _, front := range []string{"socks5", "http"} {
		t.Run(front, func(t *testing.T) {
			ht := newHeldTarget(t)
			srv, logs := resetGateway(t, "direct", "")
			_, br, tc := establish(t, srv, front, ht)
			time.Sleep(2 * splice.LingerWait)
			resetClose(t, tc)
			_, err := br.Read(make([]byte, 1))
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("the client read %v, want the target's reset passed on (ECONNRESET)", err)
			}
			tunnelsGone(t, srv, 15*time.Second, "the target reset")
			wantFields(t, tunnelLine(t, logs), `"outcome":"ok"`, `"reset":"upstream"`)
		})
	}
}

// A client that resets after the whole answer came (the target finished
// and closed) was answered: outcome ok, the reset named.
func TestTunnelClientResetAfterAnswerIsOK(t *testing.T) {
	ht := newHeldTarget(t)
	srv, logs := resetGateway(t, "direct", "")
	c, br, tc := establish(t, srv, "socks5", ht)
	tc.Close()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("client read %v after the target closed, want EOF", err)
	}
	resetClose(t, c)
	tunnelsGone(t, srv, 15*time.Second, "the client reset after its answer")
	wantFields(t, tunnelLine(t, logs), `"outcome":"ok"`, `"reset":"client"`)
}
