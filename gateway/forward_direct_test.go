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

	"github.com/rotor-proxy/rotor/health"
)

// TestForwardDirectSlowIsTargetScoped: behind direct:// a target that
// answers later than slow_body.first_byte is target_timeout (a target
// failure, which cools nothing whole), and one that stalls its body cools
// direct for that host only (there is no proxy to blame): the next
// request to another host is served, with slow_body.scope at its
// default ("upstream").
func TestForwardDirectSlowIsTargetScoped(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answer  func(c net.Conn)
		class   health.Class
		targets int // per-host cooldowns after it
	}{
		{"no answer within first_byte", func(c net.Conn) {}, health.TargetTimeout, 0},
		{"body stalls", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
		}, health.SlowBody, 1},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				slow := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err != nil {
						return
					}
					tc.answer(c)
					_, _ = io.Copy(io.Discard, br) // silent until rotor closes
				})
				fine := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err != nil {
						return
					}
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				})
				srv, _ := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
					"[slow_body]\nfirst_byte = \"300ms\"\nstall = \"300ms\"\n[pool]\nstart_eligible = true\nwait_for_upstream = \"100ms\"\n"+
					"[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
				_, _, _ = askForward(t, srv, method, "http://"+slow.Addr()+"/")
				snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
				if snap.Failures[tc.class] != 1 || snap.State != health.Eligible || len(snap.Targets) != tc.targets {
					t.Fatalf("direct after a slow target: %v, failures %v, targets %+v; want eligible, one %v, %d per-host cooldown",
						snap.State, snap.Failures, snap.Targets, tc.class, tc.targets)
				}
				// Another host (per-target cooldowns key on the host without port).
				_, port, _ := net.SplitHostPort(fine.Addr())
				resp, body, err := askForward(t, srv, method, "http://localhost:"+port+"/")
				if err != nil || resp.StatusCode != http.StatusOK || body != "ok" {
					t.Errorf("another host after a slow one: %d %q %v", resp.StatusCode, body, err)
				}
				if tc.targets == 0 {
					return
				}
				if h := snap.Targets[0].Host; !strings.HasPrefix(slow.Addr(), h) {
					t.Errorf("per-host cooldown for %q, want the slow target's host", h)
				}
			})
		}
	}
}

// TestForwardAddsNoUserAgent: a request without User-Agent reaches the
// target without one on both forwarding paths (net/http would add
// Go-http-client/1.1, a fingerprint the scraper did not send); one the
// client sent goes on unchanged.
func TestForwardAddsNoUserAgent(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
	})
	srv := directGateway(t)
	for _, method := range forwardMethods {
		for _, ua := range []string{"", "scraper/1.0"} {
			c, br := h1Dial(t, srv)
			hdr := ""
			if ua != "" {
				hdr = "User-Agent: " + ua + "\r\n"
			}
			fmt.Fprintf(c, "%s http://%s/ HTTP/1.1\r\nHost: %s\r\n%sContent-Length: 0\r\n\r\n", method, rt.Addr(), rt.Addr(), hdr)
			resp, err := http.ReadResponse(br, &http.Request{Method: method})
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %v %v", method, resp, err)
			}
			head := <-rt.heads
			got := ""
			for _, line := range strings.Split(head, "\r\n") {
				if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "User-Agent") {
					got = strings.TrimSpace(v)
				}
			}
			if got != ua {
				t.Errorf("%s with User-Agent %q: the target got %q", method, ua, got)
			}
		}
	}
}

// TestForwardBodyIdleLimit: a client that stops sending a streamed
// (chunked) request body is cut after the body idle limit (h1BodyIdle;
// shortened here) instead of holding its connection and the upstream
// exchange for ever; a body that keeps coming, however slowly overall, is
// not. (Small bodies are buffered within listen.handshake_timeout.)
func TestForwardBodyIdleLimit(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		var got []byte
		for { // a chunked body: size line, data, CRLF; ends at size 0
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			var n int
			fmt.Sscanf(line, "%x", &n)
			if n == 0 {
				break
			}
			b := make([]byte, n+2)
			if _, err := io.ReadFull(br, b); err != nil {
				return
			}
			got = append(got, b[:n]...)
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(got), got)
	})
	srv, _ := newGateway(t, "idle.toml", "allow_private_destinations = true\n"+listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	srv.h1.bodyIdle = 300 * time.Millisecond
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	head := fmt.Sprintf("POST http://%s/ HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", rt.Addr(), rt.Addr())

	// Ten chunks, one every 100 ms: slower overall than the limit (and
	// than handshake_timeout), never idle for it.
	c, br := h1Dial(t, srv)
	io.WriteString(c, head)
	for i := range 10 {
		time.Sleep(100 * time.Millisecond)
		fmt.Fprintf(c, "1\r\n%d\r\n", i)
	}
	io.WriteString(c, "0\r\n\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a body that keeps coming: %v %v", resp, err)
	}
	if b, _ := io.ReadAll(resp.Body); string(b) != "0123456789" {
		t.Errorf("the target got %q", b)
	}

	// One chunk, then silence: rotor ends the connection within a few limits.
	c, _ = h1Dial(t, srv)
	io.WriteString(c, head+"1\r\n0\r\n")
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Errorf("a stopped body: the connection was not ended by rotor: %v", err)
	}
}
