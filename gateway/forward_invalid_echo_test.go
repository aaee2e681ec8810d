package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestForwardInvalidAnswerHidesCredentials: an invalid answer that echoes
// a Proxy-Authorization header line (no colon, so net/http quotes it in
// its error) does not show the token in the client's 502. Bug: the first
// 160 bytes of the parser's error went out as they were.
func TestForwardInvalidAnswerHidesCredentials(t *testing.T) {
	const token = "Ym9iOkh0VHBQdw==" // bob:HtTpPw
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nProxy-Authorization Basic "+token+"\r\n\r\n")
		_, _ = io.Copy(io.Discard, br)
	})
	srv := stallGateway(t)
	resp, body, err := askForward(t, srv, http.MethodGet, "http://"+rt.Addr()+"/")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "invalid HTTP response") {
		t.Fatalf("got %d %q, want the 502 for an invalid answer", resp.StatusCode, body)
	}
	if strings.Contains(body, "Ym9i") {
		t.Errorf("the 502 shows the echoed token: %q", body)
	}
}
