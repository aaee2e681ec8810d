package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

// guardCanary is the wrong password the guard tests send: it must reach
// no log line.
const guardCanary = "wr0ng-Canary9"

// guardFront speaks one front's login: send writes the credentials on a
// new connection, verdict reads whether they were accepted.
type guardFront struct {
	name string
	// send dials addr and sends user/pass; the returned func reads the
	// verdict (true: accepted).
	send func(t *testing.T, addr, user, pass string) func() bool
}

var guardFronts = []guardFront{
	{"socks5", func(t *testing.T, addr, user, pass string) func() bool {
		t.Helper()
		c := guardDial(t, addr)
		// RFC 1928 greeting offering username/password, then the RFC 1929
		// sub-negotiation at once.
		b := []byte{5, 1, 2, 1, byte(len(user))}
		b = append(append(append(b, user...), byte(len(pass))), pass...)
		if _, err := c.Write(b); err != nil {
			t.Fatal(err)
		}
		return func() bool {
			t.Helper()
			var r [4]byte
			if _, err := io.ReadFull(c, r[:]); err != nil {
				t.Fatalf("socks5 verdict: %v", err)
			}
			if r[0] != 5 || r[1] != 2 || r[2] != 1 {
				t.Fatalf("socks5 answer % x", r)
			}
			return r[3] == 0
		}
	}},
	{"http", func(t *testing.T, addr, user, pass string) func() bool {
		t.Helper()
		c := guardDial(t, addr)
		// Not a proxy request: past the credentials it is a 400, so a 407
		// is the refusal.
		if _, err := fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nProxy-Authorization: Basic %s\r\n\r\n", basic(user, pass)); err != nil {
			t.Fatal(err)
		}
		return func() bool {
			t.Helper()
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("http verdict: %v", err)
			}
			_ = resp.Body.Close()
			return resp.StatusCode != http.StatusProxyAuthRequired
		}
	}},
}

// guardDial connects to addr; every read is bounded, so that a verdict
// that never comes fails the test instead of hanging it.
func guardDial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	return c
}

// guardedGateway is a built, not started, gateway with client
// scraper/s3cret on a fake clock; waits receives each delay the guard
// holds an answer for.
func guardedGateway(t *testing.T, handshake string) (*Server, *healthtest.Clock, *logBuffer, chan time.Duration) {
	t.Helper()
	text := "allow_private_destinations = true\n[pool]\nstart_eligible = true\n" +
		"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
		"[[client]]\nusername = \"scraper\"\npassword = \"s3cret\"\n" +
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"\"\nhandshake_timeout = \"" + handshake + "\"\n"
	cfg, err := ParseConfig("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	clk := healthtest.NewClock(time.Time{})
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	srv, err := New(cfg, Options{Log: zerolog.New(logs), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	waits := make(chan time.Duration, 16)
	srv.guard.onWait = func(d time.Duration) { waits <- d }
	return srv, clk, logs, waits
}

// nextWait returns the next delay the guard holds an answer for.
func nextWait(t *testing.T, waits chan time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-waits:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no answer was delayed")
		return 0
	}
}

// noWait fails when the guard held an answer.
func noWait(t *testing.T, waits chan time.Duration, what string) {
	t.Helper()
	select {
	case d := <-waits:
		t.Fatalf("%s: the answer was delayed %v", what, d)
	default:
	}
}

// TestClientAuthGuessingDelayed: the tester's 500 wrong passwords from
// one address were all answered at once, on both fronts, and nothing
// was logged at info. Now past guardThreshold failures each further
// wrong answer waits on the clock (100 ms, then 200 ms...), while a
// right password from the same address, sent meanwhile, is answered at
// once; one warn line says so, without the password.
func TestClientAuthGuessingDelayed(t *testing.T) {
	for _, f := range guardFronts {
		t.Run(f.name, func(t *testing.T) {
			srv, clk, logs, waits := guardedGateway(t, "10s")
			serve(t, srv)
			addr := srv.Addr(f.name)
			for i := range guardThreshold {
				if f.send(t, addr, "scraper", guardCanary)() {
					t.Fatalf("wrong password %d accepted", i+1)
				}
				noWait(t, waits, fmt.Sprintf("failure %d", i+1))
			}
			for _, want := range []time.Duration{100 * time.Millisecond, 200 * time.Millisecond} {
				verdict := f.send(t, addr, "scraper", guardCanary)
				// The clock stands still: the answer waits.
				if d := nextWait(t, waits); d != want {
					t.Fatalf("delay %v, want %v", d, want)
				}
				// Meanwhile the right password, from the same address, is
				// answered at once: the clock has not moved.
				if !f.send(t, addr, "scraper", "s3cret")() {
					t.Fatal("right password refused while wrong ones are delayed")
				}
				noWait(t, waits, "right password")
				clk.Advance(want)
				if verdict() {
					t.Fatal("wrong password accepted")
				}
			}
			out := logs.String()
			if n := strings.Count(out, `"message":"client authentication failing (answers delayed)"`); n != 1 {
				t.Errorf("%d warn lines for the address, want 1:\n%s", n, out)
			}
			if !strings.Contains(out, `"level":"warn","client":"127.0.0.1","failures":6,`) {
				t.Errorf("no warn line naming 127.0.0.1 with its 6 failures:\n%s", out)
			}
			if strings.Contains(out, guardCanary) || strings.Contains(out, "s3cret") {
				t.Errorf("a password was logged:\n%s", out)
			}
			if got := authFailuresTotal(t, srv, f.name, "immediate"); got != guardThreshold {
				t.Errorf(`rotor_client_auth_failures_total{front=%q,answer="immediate"} = %v, want %d`, f.name, got, guardThreshold)
			}
			if got := authFailuresTotal(t, srv, f.name, "delayed"); got != 2 {
				t.Errorf(`rotor_client_auth_failures_total{front=%q,answer="delayed"} = %v, want 2`, f.name, got)
			}
		})
	}
}

// TestClientAuthDelayDoesNotHoldDrain: a wrong-password answer held by
// the guard would have held Shutdown (the SOCKS5 handshake goroutine and
// the HTTP request are waited for) until the clock moved; the drain
// releases it at once. The clock never moves here.
func TestClientAuthDelayDoesNotHoldDrain(t *testing.T) {
	for _, f := range guardFronts {
		t.Run(f.name, func(t *testing.T) {
			srv, _, _, waits := guardedGateway(t, "10s")
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			addr := srv.Addr(f.name)
			for range guardThreshold {
				f.send(t, addr, "scraper", guardCanary)()
			}
			verdict := f.send(t, addr, "scraper", guardCanary)
			nextWait(t, waits)
			done := make(chan error, 1)
			go func() { // owner: this test; ends when Shutdown returns
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				done <- srv.Shutdown(ctx)
			}()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("Shutdown held by a delayed answer")
			}
			if f.name == "http" && verdict() {
				t.Error("wrong password accepted")
			}
		})
	}
}

// TestClientAuthDelayWithinHandshake: a delayed SOCKS5 answer is bounded
// by the handshake time left, so it still goes out before
// listen.handshake_timeout closes the connection.
func TestClientAuthDelayWithinHandshake(t *testing.T) {
	srv, clk, _, waits := guardedGateway(t, "3s")
	serve(t, srv)
	addr := srv.Addr("socks5")
	for range guardThreshold {
		guardFronts[0].send(t, addr, "scraper", guardCanary)()
	}
	c := guardDial(t, addr)
	if _, err := c.Write([]byte{5, 1, 2}); err != nil {
		t.Fatal(err)
	}
	var r [2]byte
	if _, err := io.ReadFull(c, r[:]); err != nil || r != [2]byte{5, 2} {
		t.Fatalf("method reply % x, %v", r, err)
	}
	clk.Advance(3*time.Second - 150*time.Millisecond) // the handshake is near its end
	if _, err := c.Write(append(append([]byte{1, 7}, "scraper"...), append([]byte{byte(len(guardCanary))}, guardCanary...)...)); err != nil {
		t.Fatal(err)
	}
	if d, want := nextWait(t, waits), 50*time.Millisecond; d != want {
		t.Errorf("delay %v with 150ms of the handshake left, want %v (the margin kept back)", d, want)
	}
	clk.Advance(50 * time.Millisecond)
	if _, err := io.ReadFull(c, r[:]); err != nil || r != [2]byte{1, 1} {
		t.Errorf("verdict % x, %v; want 01 01", r, err)
	}
}

// authFailuresTotal is rotor_client_auth_failures_total{front,answer},
// read from the registry.
func authFailuresTotal(t *testing.T, srv *Server, front, answer string) float64 {
	t.Helper()
	mfs, err := srv.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "rotor_client_auth_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["front"] == front && labels["answer"] == answer {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no rotor_client_auth_failures_total{front=%q,answer=%q}", front, answer)
	return 0
}
