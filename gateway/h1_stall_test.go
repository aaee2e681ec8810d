package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A request head that began but is not all there when its deadline
// passes gets 408 bad_request, whatever the part that came looks like;
// rotor used to parse the part as a whole head (bufio returns a partial
// line at a deadline) and answer "400 malformed HTTP version" or "400
// malformed request line", or close without a word when the request line
// was whole. A connection that sent nothing, or only empty lines, is
// closed without an answer, as before.
func TestH1CutHeadIs408(t *testing.T) {
	srv := directGateway(t) // handshake_timeout 300ms
	target := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"))
	full := fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target.Addr(), target.Addr())
	for _, tc := range []struct {
		name  string
		first bool     // a whole request before, on the same connection
		parts []string // sent 100 ms apart
	}{
		{"request line cut", false, []string{"GET http://" + target.Addr() + "/ HT"}},
		{"header fields cut", false, []string{"GET http://" + target.Addr() + "/ HTTP/1.1\r\nHost: x\r\nX-A: b"}},
		{"whole fields, no blank line", false, []string{"GET http://" + target.Addr() + "/ HTTP/1.1\r\nHost: x\r\n"}},
		{"second head cut", true, []string{"GET http://" + target.Addr() + "/ HTTP/1.1\r\nHo"}},
		{"second head trickled", true, []string{"G", "E", "T", " "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			if tc.first {
				io.WriteString(c, full)
				if r, b := h1Read(t, br, "GET"); r.StatusCode != http.StatusOK || b != "ok\n" {
					t.Fatalf("first answer %d %q", r.StatusCode, b)
				}
			}
			for i, p := range tc.parts {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				io.WriteString(c, p)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("X-Rotor-Error") != "bad_request" ||
				!resp.Close || !strings.Contains(string(b), "request head incomplete") {
				t.Fatalf("answer %d X-Rotor-Error %q close=%v %q, want 408 bad_request closing, request head incomplete",
					resp.StatusCode, resp.Header.Get("X-Rotor-Error"), resp.Close, b)
			}
			wantClosed(t, c, br)
		})
	}
	for _, tc := range []struct{ name, sent string }{{"nothing", ""}, {"empty lines only", "\r\n\r\n"}} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			io.WriteString(c, tc.sent)
			wantClosed(t, c, br)
		})
	}
}
