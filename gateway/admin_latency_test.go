package gateway

import (
	"encoding/json"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestAdminRecordLatency: the record shows the smoothed set-up time
// lowest-latency picks by as latency_ms once a tunnel measured one, and
// leaves it out before (an operator could not see why traffic moved).
func TestAdminRecordLatency(t *testing.T) {
	srv := directGateway(t)
	latency := func() (any, bool) {
		code, body := adminGet(t, srv, "/api/upstreams/up")
		var rec map[string]any
		if err := json.Unmarshal([]byte(body), &rec); code != 200 || err != nil {
			t.Fatalf("GET /api/upstreams/up: %d %v %s", code, err, body)
		}
		v, ok := rec["latency_ms"]
		return v, ok
	}
	if v, ok := latency(); ok {
		t.Fatalf("latency_ms before any tunnel: %v", v)
	}
	target := upstreamtest.NewTarget(t)
	resp, err := connectGet(srv.Addr("http"), "", "", target.URL("/ok"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("tunnel: %v %v", resp, err)
	}
	if v, ok := latency(); !ok || v.(float64) <= 0 {
		t.Errorf("latency_ms after a tunnel = %v (%v), want a positive number", v, ok)
	}
}
