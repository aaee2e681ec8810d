package gateway

import (
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestNoEligibleReasonSaysWhyOut: the 503 of an expired wait says why the
// upstream is out and when it is due, after the wait it made. Issue: it
// said "no upstream proxy became eligible" whatever the pool was doing.
func TestNoEligibleReasonSaysWhyOut(t *testing.T) {
	target := upstreamtest.NewTarget(t).URL("/ok")
	closed := upstreamtest.ClosedPort(t)
	srv, _ := startGateway(t, "allow_private_destinations = true\n[pool]\nstart_eligible = true\nwait_for_upstream = \"10ms\"\n"+
		"[[upstream]]\nurl = \"socks5://"+closed+"\"\nname = \"gone\"\n")
	resp, err := httpGet(t, srv.Addr("http"), "", "", target, false)
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("first request (refused): %v %v", statusOf(resp), err)
	}
	resp, err = httpGet(t, srv.Addr("http"), "", "", target, false)
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`^no eligible upstream: the only upstream is cooling \(refused\); due in [1-9][0-9]*s \(waited pool\.wait_for_upstream, 10ms\); retry later$`)
	if body := strings.TrimSpace(bodyOf(resp)); resp.StatusCode != http.StatusServiceUnavailable || !want.MatchString(body) {
		t.Errorf("second request: %d %q\nwant 503 matching %s", resp.StatusCode, body, want)
	}
}
