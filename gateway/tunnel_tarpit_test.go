package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// Tarpit targets (issue): a tunnel whose client sent and got nothing back
// within slow_body.first_byte cooled its upstream whole, so any client
// could take healthy upstreams out one after another by tunnelling to a
// host that accepts and never answers.

const tarpitFirstByte = 300 * time.Millisecond

// lineTarget listens on 127.0.0.1 and, when answer is set, answers each
// line a connection sends with "pong\n"; otherwise it reads and never
// writes (a tarpit). Its connections end when the peer closes or the test
// ends.
func lineTarget(t *testing.T, answer bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() { // owner: the test (Cleanup); ends when the listener closes
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() { // ends when the peer closes or Cleanup closes c
				defer wg.Done()
				defer c.Close()
				if !answer {
					_, _ = io.Copy(io.Discard, c)
					return
				}
				br := bufio.NewReader(c)
				for {
					if _, err := br.ReadString('\n'); err != nil {
						return
					}
					if _, err := io.WriteString(c, "pong\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// namedTargets returns a fake upstream's Dial that sends "tarpit.test"
// to tarpit and every other name to ok, so targets are distinct hosts
// (per-host cooldowns key on the host) while all listen on 127.0.0.1.
func namedTargets(tarpit, ok string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		to := ok
		if strings.HasPrefix(addr, "tarpit.test:") {
			to = tarpit
		}
		var d net.Dialer
		return d.DialContext(ctx, network, to)
	}
}

// tarpitPool starts three fake upstreams of kind ("socks5", "http") named
// a, b, c, the first one with mode a, and a gateway over them.
func tarpitPool(t *testing.T, kind string, a upstreamtest.Mode) (*Server, map[string]*upstreamtest.Server) {
	t.Helper()
	dial := namedTargets(lineTarget(t, false), lineTarget(t, true))
	names := []string{"a", "b", "c"}
	ups := map[string]*upstreamtest.Server{}
	for _, n := range names {
		opts := upstreamtest.Options{Dial: dial}
		if n == "a" {
			opts.Mode = a
		}
		if kind == "http" {
			ups[n] = upstreamtest.NewHTTPProxy(t, opts)
		} else {
			ups[n] = upstreamtest.NewSOCKS5(t, opts)
		}
	}
	conf := fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nstrategy = \"round-robin\"\nwait_for_upstream = \"0s\"\n[slow_body]\nfirst_byte = %q\n%s",
		probeConf(upstreamtest.NewTarget(t)), tarpitFirstByte.String(), upstreamConf(names, ups, nil))
	srv, _ := startGateway(t, conf)
	return srv, ups
}

// ping opens a tunnel to addr through front, sends a line and reads the
// answer: "pong", "silent" (the tunnel closed with nothing back), or
// "refused: ..." when the gateway did not open the tunnel.
func ping(t *testing.T, srv *Server, front, addr string) string {
	t.Helper()
	c, err := net.Dial("tcp", srv.Addr(front))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if front == "http" {
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT answer: %v", err)
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
			return fmt.Sprintf("refused: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
	} else {
		host, port, _ := net.SplitHostPort(addr)
		var p int
		fmt.Sscan(port, &p)
		req := append([]byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}, host...)
		if _, err := c.Write(append(req, byte(p>>8), byte(p))); err != nil {
			t.Fatal(err)
		}
		head := make([]byte, 12) // method choice, reply with an IPv4 bound address
		if _, err := io.ReadFull(br, head); err != nil {
			t.Fatalf("SOCKS reply: %v", err)
		}
		if head[3] != 0 {
			return fmt.Sprintf("refused: reply %d", head[3])
		}
	}
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	switch {
	case err == nil && line == "pong\n":
		return "pong"
	case err == io.EOF && line == "":
		return "silent"
	}
	t.Fatalf("tunnel to %s: %q, %v", addr, line, err)
	return ""
}

// slowBodyOf sums the slow_body failures of the named upstreams.
func slowBodyOf(t *testing.T, srv *Server, names ...string) uint64 {
	t.Helper()
	var n uint64
	for _, name := range names {
		n += snapOf(t, srv, name).Failures[health.SlowBody]
	}
	return n
}

// TestTarpitTunnelsLeaveUpstreamsEligible: tunnels to a host that accepts
// and never answers cool each upstream they went through for that host
// only; the pool stays eligible, serves other hosts, and, once every
// upstream is cooling for the tarpit, refuses it saying so.
func TestTarpitTunnelsLeaveUpstreamsEligible(t *testing.T) {
	for _, tc := range []struct{ front, kind string }{{"socks5", "socks5"}, {"http", "http"}, {"http", "socks5"}} {
		t.Run(tc.front+" front, "+tc.kind+" upstreams", func(t *testing.T) {
			t.Parallel()
			srv, _ := tarpitPool(t, tc.kind, upstreamtest.Mode{})
			var got []string
			silent := uint64(0)
			for range 6 {
				g := ping(t, srv, tc.front, "tarpit.test:443")
				got = append(got, g)
				if g == "silent" {
					// The tunnel's end is reported after the client saw
					// it close: wait for it before the next pick.
					silent++
					waitFor(t, func() bool { return slowBodyOf(t, srv, "a", "b", "c") == silent })
				}
			}
			for i, g := range got {
				want := "silent"
				if i >= 3 {
					want = "refused"
				}
				if !strings.HasPrefix(g, want) {
					t.Errorf("tunnel %d to the tarpit: %q, want %s (got %q)", i, g, want, got)
				}
			}
			if tc.front == "http" && !strings.Contains(got[5], "cooling for this host only (slow_body ×3)") {
				t.Errorf("refusal %q, want it to say the 3 upstreams cool for this host (slow_body)", got[5])
			}
			for _, n := range []string{"a", "b", "c"} {
				s := snapOf(t, srv, n)
				if s.State != health.Eligible {
					t.Errorf("%s: %v (%v at %v) after tunnels to a tarpit, want eligible", n, s.State, s.Reason, s.Stage)
				}
				if len(s.Targets) != 1 || s.Targets[0].Host != "tarpit.test" || s.Targets[0].Reason != health.SlowBody ||
					s.Targets[0].Stage != health.StageFirstByte {
					t.Errorf("%s: per-host cooldowns %+v, want slow_body at first_byte for tarpit.test", n, s.Targets)
				}
			}
			for i := range 3 {
				if g := ping(t, srv, tc.front, fmt.Sprintf("ok%d.test:443", i)); g != "pong" {
					t.Errorf("another host after the tarpit: %q, want pong", g)
				}
			}
		})
	}
}

// TestSilentUpstreamStillCools: an upstream that is itself silent (it
// answers CONNECT and never relays the target's bytes) at several hosts
// that answer through the others still cools, as slow_body at first_byte;
// the others stay eligible.
func TestSilentUpstreamStillCools(t *testing.T) {
	for _, tc := range []struct{ front, kind string }{{"socks5", "socks5"}, {"http", "http"}} {
		t.Run(tc.front+" front, "+tc.kind+" upstreams", func(t *testing.T) {
			t.Parallel()
			srv, _ := tarpitPool(t, tc.kind, upstreamtest.Mode{Fault: upstreamtest.Accept, FirstByteDelay: time.Hour})
			silences := uint64(0)
			for h := 0; h < 6 && snapOf(t, srv, "a").State == health.Eligible; h++ {
				// Through a until it is silent for this host, then one
				// answer through another: the evidence comes after a's
				// silence.
				addr := fmt.Sprintf("site%d.test:443", h)
				silent := false
				for range 4 {
					g := ping(t, srv, tc.front, addr)
					if g == "silent" {
						silent = true
						silences++ // only a is silent; wait for its report (as above)
						waitFor(t, func() bool { return slowBodyOf(t, srv, "a") == silences })
					} else if g == "pong" && silent {
						break
					}
				}
			}
			s := snapOf(t, srv, "a")
			if s.State != health.Cooling || s.Reason != health.SlowBody || s.Stage != health.StageFirstByte {
				t.Fatalf("a, silent itself: %v (%v at %v), want cooling slow_body at first_byte", s.State, s.Reason, s.Stage)
			}
			if d := s.History[len(s.History)-1].Detail; !strings.Contains(d, "answer through other upstreams") {
				t.Errorf("a's history detail %q, want it to say the hosts answer through other upstreams", d)
			}
			for _, n := range []string{"b", "c"} {
				if s := snapOf(t, srv, n); s.State != health.Eligible || len(s.Targets) != 0 {
					t.Errorf("%s: %v, per-host %+v; want eligible, no per-host cooldown", n, s.State, s.Targets)
				}
			}
		})
	}
}
