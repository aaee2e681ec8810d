package gateway

import (
	"fmt"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestH1ExpectWithoutBody: an Expect other than 100-continue is refused
// with 417 on a request without a body too, as README says it always is
// (bug: only a request with a body was, and a GET went on to the target
// with its "Expect: magic"); 100-continue on such a request is served.
func TestH1ExpectWithoutBody(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv := directGateway(t)

	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\n\r\n", target.URL("/ok"), target.Addr())
	if r, b := h1Read(t, br, "GET"); r.StatusCode != 200 || b != "ok\n" {
		t.Fatalf("GET with Expect: 100-continue: %d %q, want 200", r.StatusCode, b)
	}

	c, br = h1Dial(t, srv)
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nExpect: magic\r\n\r\n", target.URL("/ok"), target.Addr())
	r, b := h1Read(t, br, "GET")
	if r.StatusCode != 417 || r.Header.Get("X-Rotor-Error") != "bad_request" || !strings.Contains(b, "100-continue") {
		t.Fatalf("GET with Expect: magic: %d %q X-Rotor-Error %q, want 417 bad_request", r.StatusCode, b, r.Header.Get("X-Rotor-Error"))
	}
	wantClosed(t, c, br)
	// A refused head, counted as the others are.
	var m dto.Metric
	if err := srv.metrics.tunnelsTotal.WithLabelValues("http", "handshake_error").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 1 {
		t.Errorf(`rotor_tunnels_total{front="http",outcome="handshake_error"} = %v, want 1`, got)
	}
}
