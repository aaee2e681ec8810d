package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestH1HTTP10TransferEncodingRefused: an HTTP/1.0 request with a
// Transfer-Encoding is refused 400 and its connection closed (RFC 9112
// section 6.1: its framing is faulty, even with a Content-Length), and
// nothing reaches the target. http.ReadRequest drops Transfer-Encoding
// from an HTTP/1.0 request, so a chunked POST went on as a POST with an
// empty body, and the client got the target's 200 for a body the target
// never saw.
func TestH1HTTP10TransferEncodingRefused(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"))
	srv := directGateway(t)
	for _, tc := range []struct{ name, fields, body string }{
		{"chunked", "Transfer-Encoding: chunked\r\n", "3\r\nabc\r\n0\r\n\r\n"},
		{"chunked and Content-Length", "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n", "abc"},
		{"identity", "transfer-encoding: identity\r\nContent-Length: 3\r\n", "abc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			fmt.Fprintf(c, "POST http://%s/p HTTP/1.0\r\nHost: %s\r\nConnection: keep-alive\r\n%s\r\n%s", rt.Addr(), rt.Addr(), tc.fields, tc.body)
			r, body := h1Read(t, br, http.MethodPost)
			if r.StatusCode != http.StatusBadRequest || r.Header.Get("X-Rotor-Error") != "bad_request" ||
				!strings.Contains(body, "Transfer-Encoding") {
				t.Fatalf("answer %d %q (X-Rotor-Error %q), want 400 bad_request naming Transfer-Encoding", r.StatusCode, body, r.Header.Get("X-Rotor-Error"))
			}
			if !r.Close {
				t.Errorf("the 400 keeps the connection open")
			}
			wantClosed(t, c, br)
		})
	}
	select {
	case head := <-rt.heads:
		t.Errorf("the target received a request:\n%s", head)
	default:
	}
	// An HTTP/1.1 chunked request still goes on, decoded.
	got := make(chan string, 1)
	echo := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		b, err := io.ReadAll(req.Body)
		if err != nil {
			return
		}
		got <- string(b)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
	})
	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "POST http://%s/p HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", echo.Addr(), echo.Addr())
	if r, body := h1Read(t, br, http.MethodPost); r.StatusCode != http.StatusOK || body != "ok\n" {
		t.Fatalf("HTTP/1.1 chunked: %d %q, want 200", r.StatusCode, body)
	}
	if b := <-got; b != "abc" {
		t.Errorf("HTTP/1.1 chunked request's body reached the target as %q, want \"abc\"", b)
	}
}
