package gateway

import (
	"strings"
	"testing"
)

// TestForwardTargetRotorHeadersRemoved: X-Rotor-* fields in a target's
// answer are rotor's vocabulary, not the target's: a site must not make a
// scraper believe rotor failed (X-Rotor-Error) or name another upstream.
// They are removed from forwarded answers, on the lean client (GET) and
// the Transport (POST) alike; X-Rotor-Upstream is rotor's own, once.
func TestForwardTargetRotorHeadersRemoved(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\n"+
		"X-Rotor-Error: refused; stage=dial; upstream=evil\r\n"+
		"X-Rotor-Upstream: evil\r\n"+
		"x-rotor-whatever: 1\r\n"+
		"X-Rotorless: kept\r\n"+
		"Content-Length: 3\r\n\r\nok\n"))
	srv := directGateway(t)
	for _, method := range forwardMethods {
		t.Run(method, func(t *testing.T) {
			resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
			if err != nil || resp.StatusCode != 200 || body != "ok\n" {
				t.Fatalf("got %s %q %v, want 200 ok", statusOf(resp), body, err)
			}
			for k, v := range resp.Header {
				if strings.HasPrefix(strings.ToLower(k), "x-rotor-") && k != "X-Rotor-Upstream" {
					t.Errorf("target's %s: %q reached the client", k, v)
				}
			}
			if got := resp.Header.Values("X-Rotor-Upstream"); len(got) != 1 || got[0] != "up" {
				t.Errorf("X-Rotor-Upstream = %q, want [up]", got)
			}
			if got := resp.Header.Get("X-Rotorless"); got != "kept" {
				t.Errorf("X-Rotorless = %q, want kept (only the X-Rotor- prefix is rotor's)", got)
			}
		})
	}
	noFailures(t, srv, "up")
}
