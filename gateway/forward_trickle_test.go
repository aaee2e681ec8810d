package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// trickleAnswer reads a request head, then sends a whole answer one byte
// every 100 ms, until it is sent or the connection fails; silent instead
// sends nothing and waits for the other end to close.
func trickleAnswer(silent bool) func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
	return func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		if silent {
			_, _ = io.Copy(io.Discard, br)
			return
		}
		answer := "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
		for i := range len(answer) {
			if _, err := io.WriteString(c, answer[i:i+1]); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// TestForwardTrickledAnswerIsSlowBody: an answer whose status line
// trickles in past slow_body.first_byte is failed as a silent one is
// (the 5xx and X-Rotor-Error of a silent target: slow_body at first_byte
// behind a proxy, target_timeout behind direct://), from a direct target
// and from an http:// upstream alike
// (issue: bufio's ReadLine handed the partial line "HTTP/1.1" to
// http.ReadResponse with no error at the deadline, and the answer was "an
// invalid HTTP response", target_unreachable: an http upstream doing this
// never cooled).
func TestForwardTrickledAnswerIsSlowBody(t *testing.T) {
	type result struct {
		code int
		xerr string
		slow bool
	}
	run := func(t *testing.T, scheme string, silent bool) result {
		rt := newRawTarget(t, trickleAnswer(silent))
		up, target := "direct://", "http://"+rt.Addr()+"/"
		if scheme == "http" {
			// The fake is the proxy: it answers the forwarded request.
			up, target = "http://"+rt.Addr(), "http://example.test/"
		}
		srv, _ := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
			"[slow_body]\nfirst_byte = \"300ms\"\n[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = \""+up+"\"\nname = \"up\"\n")
		resp, err := httpGet(t, srv.Addr("http"), "", "", target, false)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		r := result{code: resp.StatusCode, xerr: resp.Header.Get("X-Rotor-Error")}
		snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
		for _, c := range snap.Counts {
			r.slow = r.slow || (c.Class == health.SlowBody && c.Stage == health.StageFirstByte)
		}
		return r
	}
	for _, scheme := range []string{"direct", "http"} {
		t.Run(scheme, func(t *testing.T) {
			silent := run(t, scheme, true)
			got := run(t, scheme, false)
			// Behind direct:// a silent target is a target_timeout (nothing
			// upstream to blame); behind a proxy, slow_body at first_byte.
			want := "slow_body; stage=first_byte"
			if scheme == "direct" {
				want = "target_timeout; stage=first_byte"
			}
			if !strings.HasPrefix(silent.xerr, want) || silent.slow != (scheme != "direct") {
				t.Fatalf("silent target: %+v, want %s", silent, want)
			}
			if got != silent {
				t.Errorf("trickled answer: %+v; want what a silent target gets, %+v", got, silent)
			}
			if got.code == http.StatusOK {
				t.Errorf("trickled answer relayed")
			}
		})
	}
}
