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

// TestForwardDirectSlowTargetIsTargetTimeout: a target that sends no
// answer within slow_body.first_byte behind the direct upstream is a
// target that timed out: 504 target_timeout at first_byte, the direct
// upstream not cooled (there is no proxy to blame). rotor answered 502
// slow_body.
func TestForwardDirectSlowTargetIsTargetTimeout(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		select { // rt.heads holds 64
		case <-rt.heads:
		default:
		}
		if _, err := rt.readHead(br); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, br) // never answers; ends when rotor or the cleanup closes
	})
	srv, _ := startGateway(t, "allow_private_destinations = true\n[slow_body]\nfirst_byte = \"300ms\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	for _, method := range []string{http.MethodGet, http.MethodPost} { // lean path, Transport
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "%s http://%s/slow HTTP/1.1\r\nHost: %s\r\nContent-Length: 2\r\n\r\nhi", method, rt.Addr(), rt.Addr())
		r, body := h1Read(t, br, method)
		if r.StatusCode != http.StatusGatewayTimeout || !strings.HasPrefix(r.Header.Get("X-Rotor-Error"), "target_timeout; stage=first_byte; upstream=up") {
			t.Errorf("%s: answer %d %q (%s), want 504 target_timeout at first_byte", method, r.StatusCode, r.Header.Get("X-Rotor-Error"), body)
		}
	}
	if snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record()); snap.State != health.Eligible {
		t.Errorf("direct upstream %v (%v %v), want eligible", snap.State, snap.Reason, snap.Stage)
	}
}
