package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// forwardThenGarbage is an http:// upstream that forwards each request
// to its target in origin form, reads the target's answer, and then
// answers rotor with bytes that are not HTTP: the target has the request,
// rotor cannot tell.
func forwardThenGarbage(c net.Conn, br *bufio.Reader, _ *rawTarget) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	tc, err := net.DialTimeout("tcp", req.URL.Host, 5*time.Second)
	if err != nil {
		return
	}
	defer tc.Close()
	_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := req.Write(tc); err != nil { // origin form
		return
	}
	if resp, err := http.ReadResponse(bufio.NewReader(tc), req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	_, _ = io.WriteString(c, "\x00\x00garbage reply\r\n\r\n")
}

// countingTarget answers every request 200 "ok" and counts them by
// method: GETs, the others.
func countingTarget(t *testing.T, n *[2]atomic.Int64) *rawTarget {
	return newRawTarget(t, func(c net.Conn, br *bufio.Reader, _ *rawTarget) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			if req.Method == http.MethodGet {
				n[0].Add(1)
			} else {
				n[1].Add(1)
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"); err != nil {
				return
			}
		}
	})
}

// TestForwardNotHTTPAfterSentNotResent: an http:// upstream that
// forwarded a POST to its target and then answered rotor with garbage
// made rotor send the POST again through another upstream (the target
// got it twice): the not-HTTP answer was classed at proxy_handshake,
// "before any byte of the request reached a target". The request was
// written, so it is first_byte: the upstream is still the one blamed and
// cooled (upstream_error), a GET goes on to another upstream, a POST gets
// a 502 and is not sent twice.
func TestForwardNotHTTPAfterSentNotResent(t *testing.T) {
	for _, tc := range []struct {
		method string
		body   int // bytes; over retry_body_limit: streamed
	}{
		{http.MethodGet, 0},          // lean client
		{http.MethodPost, 5},         // Transport, buffered body
		{http.MethodPut, 5},          // Transport, buffered body, not idempotent enough to resend
		{http.MethodPost, 100 << 10}, // Transport, streamed body
	} {
		t.Run(fmt.Sprintf("%s %d", tc.method, tc.body), func(t *testing.T) {
			var got [2]atomic.Int64 // GETs, the others
			target := countingTarget(t, &got)
			bad := newRawTarget(t, forwardThenGarbage)
			good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
			srv, logs := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n[pool]\nstart_eligible = true\nmax_attempts = 3\n"+
				"[[upstream]]\nurl = \"http://%s\"\nname = \"bad\"\n[[upstream]]\nurl = %q\nname = \"good\"\n", bad.Addr(), good.URL().String()))
			// Round-robin: one of the two requests starts on bad.
			var failed int
			for i := range 2 {
				resp, body := sendBody(t, srv, tc.method, "http://"+target.Addr()+"/buyX", tc.body, "")
				switch {
				case resp.StatusCode == http.StatusOK && resp.Header.Get("X-Rotor-Upstream") == "good":
				case tc.method != http.MethodGet && resp.StatusCode == http.StatusBadGateway:
					failed++
					if got, want := resp.Header.Get("X-Rotor-Error"), "upstream_error; stage=first_byte; upstream=bad"; got != want {
						t.Errorf("request %d: X-Rotor-Error %q, want %q (%s)", i, got, want, strings.TrimSpace(body))
					}
				default:
					t.Fatalf("request %d: %d %q (%s)\n%s", i, resp.StatusCode, resp.Header.Get("X-Rotor-Error"), strings.TrimSpace(body), logs)
				}
			}
			if tc.method == http.MethodGet {
				if n := got[0].Load(); n != 3 {
					t.Errorf("the target got %d GETs, want 3 (one through bad, two through good)", n)
				}
			} else {
				if failed != 1 {
					t.Errorf("%d requests got a 502, want 1 (the one that started on bad)", failed)
				}
				if n := got[1].Load(); n != 2 {
					t.Errorf("the target got %d %ss for 2 requests, want 2: a request that may have been received was sent again", n, tc.method)
				}
			}
			snap := srv.Tracker().Snapshot(srv.Pool().Lookup("bad").Record())
			if snap.State != health.Cooling || snap.Reason != health.UpstreamError || snap.Stage != health.StageFirstByte {
				t.Errorf("bad upstream %v %v %v (%s), want cooling upstream_error first_byte", snap.State, snap.Reason, snap.Stage, snap.Detail)
			}
			noFailures(t, srv, "good")
		})
	}
}
