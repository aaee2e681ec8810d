package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// TestForwardSquidWordClassifiedRaw: a proxy's answer to a forwarded
// request was classified (upstream.PlainAnswer) from its scrubbed text:
// with an upstream password "I", squid's 400 ERR_INVALID_URL read
// "ERR_xxxxxNVALxxxxxD_URL", no request error, and the upstream cooled
// for the host; with a password "T", a 403 ERR_TOO_BIG (the target's body
// over reply_body_max_size) became a policy refusal (403 / REP 2 to the
// client). Classification now reads squid's own word as sent.
func TestForwardSquidWordClassifiedRaw(t *testing.T) {
	for _, tc := range []struct {
		pass, answer, header string
		code                 int
	}{
		{"I", "HTTP/1.1 400 Bad Request\r\nX-Squid-Error: ERR_INVALID_URL 0\r\nContent-Length: 0\r\n\r\n", "bad_request; upstream=squid", http.StatusBadRequest},
		{"T", "HTTP/1.1 403 Forbidden\r\nX-Squid-Error: ERR_TOO_BIG 0\r\nContent-Length: 0\r\n\r\n", "upstream_error; stage=http_status; upstream=squid", http.StatusBadGateway},
	} {
		t.Run(tc.pass, func(t *testing.T) {
			proxy := newRawTarget(t, serveAnswers(false, tc.answer))
			srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\n"+
				"[target_http_error]\nstatuses = []\n[[upstream]]\nurl = \"http://u:%s@%s\"\nname = \"squid\"\n", tc.pass, proxy.Addr()))
			resp, body, err := askForward(t, srv, http.MethodGet, "http://example.test/")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.code || resp.Header.Get("X-Rotor-Error") != tc.header {
				t.Errorf("client got %d %q (%q), want %d %q", resp.StatusCode, resp.Header.Get("X-Rotor-Error"), body, tc.code, tc.header)
			}
			if strings.Contains(body, "policy") {
				t.Errorf("body %q: no policy refusal", body)
			}
			snap := srv.Tracker().Snapshot(srv.Pool().Lookup("squid").Record())
			if tc.code == http.StatusBadRequest && len(snap.Counts) != 0 {
				t.Errorf("squid has failures %+v, want none (the client's request)", snap.Counts)
			}
			if tc.code == http.StatusBadGateway && (len(snap.Targets) != 1 || snap.Targets[0].Reason != health.UpstreamError || strings.Contains(snap.Targets[0].Host, ":")) {
				t.Errorf("squid targets %+v, want upstream_error for the host (any port)", snap.Targets)
			}
		})
	}
}
