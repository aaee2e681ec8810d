package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// reachGateway runs a gateway over two upstreams, bad (tag bad, first in
// the pool's turn) and good (tag good), both eligible at once, and has
// good reach target first.
func reachGateway(t *testing.T, bad, good *upstreamtest.Server, target *upstreamtest.Target) *Server {
	t.Helper()
	conf := fmt.Sprintf("[pool]\nstart_eligible = true\nwait_for_upstream = \"100ms\"\nhandshake_timeout = \"5s\"\n"+
		"[[upstream]]\nurl = %q\nname = \"bad\"\ntags = [\"bad\"]\n[[upstream]]\nurl = %q\nname = \"good\"\ntags = [\"good\"]\n",
		bad.URL().String(), good.URL().String())
	srv, _ := startGateway(t, conf)
	resp, err := httpGet(t, srv.Addr("http"), "scraper-tag-good", "x", target.URL("/ok"), false)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET through good: %v %v", resp, err)
	}
	return srv
}

// TestForwardRetriedWhereOthersReach: an http:// upstream that accepts
// plain-HTTP requests and closes them unanswered (tinyproxy does so for a
// dead target) while another upstream reaches the same host:port. Issue:
// the GET got 502 target_unreachable at first_byte, not retried, and the
// upstream stayed eligible for that site for ever. Want: the GET (its
// body is replayable) is served by the other upstream, and the one that
// closed cools for that host:port only (upstream_error at first_byte).
// The same through the SOCKS front, for a SOCKS5 upstream answering REP 5
// for a host others reach (an egress firewall): the client gets REP 0.
func TestForwardRetriedWhereOthersReach(t *testing.T) {
	t.Run("plain HTTP GET, upstream closes unanswered", func(t *testing.T) {
		target := upstreamtest.NewTarget(t)
		bad := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
		good := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
		srv := reachGateway(t, bad, good, target)
		bad.SetMode(upstreamtest.Mode{Fault: upstreamtest.CloseAfterAccept})
		for i := range 2 { // the pool's turn meets bad in one of them
			resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Rotor-Upstream") != "good" {
				t.Fatalf("GET %d: %s from %q (%s; %s), want 200 from good", i, resp.Status, resp.Header.Get("X-Rotor-Upstream"),
					resp.Header.Get("X-Rotor-Error"), bodyOf(resp))
			}
		}
		if bad.Connections() == 0 {
			t.Fatal("bad was never tried")
		}
		s := srv.Tracker().Snapshot(srv.Pool().Lookup("bad").Record())
		if s.State != health.Eligible {
			t.Errorf("bad: %v %v/%v, want eligible", s.State, s.Reason, s.Stage)
		}
		if len(s.Targets) != 1 || s.Targets[0].Host != target.Addr() || s.Targets[0].Reason != health.UpstreamError ||
			s.Targets[0].Stage != health.StageFirstByte {
			t.Errorf("bad's per-target cooldowns %+v, want upstream_error/first_byte for %s", s.Targets, target.Addr())
		}
	})

	t.Run("plain HTTP POST is not sent twice", func(t *testing.T) {
		target := upstreamtest.NewTarget(t)
		bad := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
		good := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
		srv := reachGateway(t, bad, good, target)
		bad.SetMode(upstreamtest.Mode{Fault: upstreamtest.CloseAfterAccept})
		before := target.Requests()
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 7\r\n\r\norder=1", target.URL("/echo"), target.Addr())
		resp, body := h1Read(t, br, http.MethodPost)
		if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(resp.Header.Get("X-Rotor-Error"), "target_unreachable; stage=first_byte; upstream=bad") {
			t.Errorf("POST: %s %q (%s), want 502 target_unreachable from bad: it may have been received", resp.Status,
				resp.Header.Get("X-Rotor-Error"), body)
		}
		if n := target.Requests() - before; n != 0 {
			t.Errorf("the POST reached the target %d times through another upstream", n)
		}
	})

	t.Run("SOCKS5 upstream answers REP 5", func(t *testing.T) {
		target := upstreamtest.NewTarget(t)
		bad := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
		good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
		srv := reachGateway(t, bad, good, target)
		bad.SetMode(upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 5})
		for i := range 2 {
			resp, err := socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok"))
			if err != nil {
				t.Fatalf("GET %d through the SOCKS front: %v", i, err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %d: %s", i, resp.Status)
			}
		}
		s := srv.Tracker().Snapshot(srv.Pool().Lookup("bad").Record())
		if s.State != health.Eligible || len(s.Targets) != 1 || s.Targets[0].Host != target.Addr() {
			t.Errorf("bad: %v, targets %+v, want eligible, cooling for %s only", s.State, s.Targets, target.Addr())
		}
	})
}
