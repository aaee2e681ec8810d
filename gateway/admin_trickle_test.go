package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminBodyTimeoutIs408: a body that stops coming (Content-Length 50,
// 10 bytes sent, then silence) is cut at listen.handshake_timeout with a
// 408 whose text names no socket address (issue: 400 "invalid body: …:
// read tcp 127.0.0.1:…->127.0.0.1:…: i/o timeout").
func TestAdminBodyTimeoutIs408(t *testing.T) {
	srv, _ := startGateway(t, "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"127.0.0.1:0\"\nhandshake_timeout = \"500ms\"\n"+
		"[[upstream]]\nurl = \"direct://\"\nname = \"d\"\n")
	for _, action := range []string{"disable", "enable", "report"} {
		t.Run(action, func(t *testing.T) {
			c, err := net.Dial("tcp", srv.Addr("admin"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			head := "POST /api/upstreams/d/" + action + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 50\r\n\r\n"
			if _, err := io.WriteString(c, head+`{"detail":`); err != nil {
				t.Fatal(err)
			}
			if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("status %d %s; want 408", resp.StatusCode, b)
			}
			assertJSONError(t, resp.Header, string(b))
			if strings.Contains(string(b), "127.0.0.1") || strings.Contains(string(b), "tcp") {
				t.Errorf("body %s names a socket", b)
			}
		})
	}
}
