package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestForwardTargetKindSaidOnce: a plain-HTTP forward that squid could
// not connect says the kind and squid's tag once. Issue: the reason
// read "the target refused the connection (reported by upstream squid:
// ERR_CONNECT_FAIL 111): proxy answered the forwarded request with "503
// Service Unavailable" (ERR_CONNECT_FAIL 111)".
func TestForwardTargetKindSaidOnce(t *testing.T) {
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 503,
		Header: http.Header{"X-Squid-Error": {"ERR_CONNECT_FAIL 111"}}}})
	srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\n"+
		"[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL().String()))
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://"+closedPort(t)+"/", false)
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimSpace(bodyOf(resp))
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "the target refused the connection") {
		t.Fatalf("%d %q, want a 502 saying the target refused", resp.StatusCode, body)
	}
	if n := strings.Count(body, "ERR_CONNECT_FAIL 111"); n != 1 {
		t.Errorf("squid's tag said %d times, want once: %q", n, body)
	}
	if h := resp.Header.Get("X-Rotor-Error"); !strings.HasSuffix(h, "; kind=refused") {
		t.Errorf("X-Rotor-Error %q, want kind=refused", h)
	}
}
