package gateway

import (
	"fmt"
	"net/http"
	"testing"
)

// TestForwardLeanEarlyAnswerThenReset: the lean client (an idempotent
// request with a buffered body) gave up on a failed write without reading
// what came back: an early answer (a 413) followed by a reset while the
// body was being written became a 502 target_unreachable and cooled the
// upstream for the host. The answer is read and relayed, as the
// Transport's path does (answeredConn), and nobody is blamed.
func TestForwardLeanEarlyAnswerThenReset(t *testing.T) {
	for _, kind := range []string{"http", "direct"} {
		t.Run(kind, func(t *testing.T) {
			far := earlyResetProxy(t, "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\ntoo large")
			// A body buffered whole (retry_body_limit), larger than the
			// sockets' buffers: the reset comes while rotor writes it.
			conf := fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\nretry_body_limit = %d\n"+
				"[[upstream]]\nurl = \"http://%s\"\nname = \"up\"\n", 20<<20, far.Addr())
			uri := "http://example.test/upload"
			if kind == "direct" {
				conf = fmt.Sprintf("allow_private_destinations = true\n[pool]\nstart_eligible = true\nmax_attempts = 1\nretry_body_limit = %d\n"+
					"[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n", 20<<20)
				uri = "http://" + far.Addr() + "/upload"
			}
			srv, logs := startGateway(t, conf)
			for i := range 5 {
				resp, body := sendBody(t, srv, http.MethodGet, uri, 16<<20, "")
				if resp.StatusCode != http.StatusRequestEntityTooLarge || body != "too large" {
					t.Fatalf("GET %d: %d %q (X-Rotor-Error %q), want the early 413\n%s", i, resp.StatusCode, body, resp.Header.Get("X-Rotor-Error"), logs)
				}
			}
			noFailures(t, srv, "up")
		})
	}
}
