package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// TestForwardDirectSlowIsTargetScoped: behind direct:// a target that
// answers later than slow_body.first_byte, or stalls its body, cools
// direct for that host only (there is no proxy to blame): the next
// request to another host is served, with slow_body.scope at its
// default ("upstream").
func TestForwardDirectSlowIsTargetScoped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(c net.Conn)
	}{
		{"no answer within first_byte", func(c net.Conn) {}},
		{"body stalls", func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc")
		}},
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
				if snap.Failures[health.SlowBody] != 1 || snap.State != health.Eligible || len(snap.Targets) != 1 {
					t.Fatalf("direct after a slow target: %v, failures %v, targets %+v; want eligible, one slow_body, one per-host cooldown",
						snap.State, snap.Failures, snap.Targets)
				}
				// Another host (per-target cooldowns key on the host without port).
				_, port, _ := net.SplitHostPort(fine.Addr())
				resp, body, err := askForward(t, srv, method, "http://localhost:"+port+"/")
				if err != nil || resp.StatusCode != http.StatusOK || body != "ok" {
					t.Errorf("another host after a slow one: %d %q %v", resp.StatusCode, body, err)
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
