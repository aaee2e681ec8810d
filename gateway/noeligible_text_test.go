package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestNoWaitReasonSaysSo: the 503 of a pool with wait_for_upstream = "0s"
// says there was no wait, and a single upstream is one upstream. Issue:
// "the 1 upstreams are eligible but all at their rate limit (waited
// pool.wait_for_upstream)", answered after 3 ms.
func TestNoWaitReasonSaysSo(t *testing.T) {
	target := upstreamtest.NewTarget(t).URL("/ok")
	srv, _ := startGateway(t, "allow_private_destinations = true\n[pool]\nstart_eligible = true\nwait_for_upstream = \"0s\"\n"+
		"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\nrate = 0.001\n") // one token, the next in 1000 s
	if resp, err := httpGet(t, srv.Addr("http"), "", "", target, false); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request (the token): %v %v", resp, err)
	}
	resp, err := httpGet(t, srv.Addr("http"), "", "", target, false)
	if err != nil {
		t.Fatal(err)
	}
	want := "no eligible upstream: the only upstream is eligible but at its rate limit (pool.wait_for_upstream is 0s: no wait); retry later"
	if body := strings.TrimSpace(bodyOf(resp)); resp.StatusCode != http.StatusServiceUnavailable || body != want {
		t.Errorf("second request: %d %q\nwant 503 %q", resp.StatusCode, body, want)
	}
}
