package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAdminBodyBounded: a request whose body never arrives in full (a
// POST with Content-Length: 100 and one byte sent) is cut after
// listen.handshake_timeout, as the HTTP front cuts one; the admin server
// had ReadHeaderTimeout only and held each such connection, a goroutine
// and an fd, for ever (150 s observed). The margin for the cut is 30
// times the timeout; a whole request sent slowly within it still works.
func TestAdminBodyBounded(t *testing.T) {
	srv, _ := startGateway(t, "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"127.0.0.1:0\"\nhandshake_timeout = \"1s\"\n"+
		"[[upstream]]\nurl = \"direct://\"\nname = \"d\"\n")
	admin := srv.Addr("admin")
	const head = "POST /api/upstreams/d/report HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
	held := make([]net.Conn, 3)
	for i := range held {
		c, err := net.Dial("tcp", admin)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := io.WriteString(c, head+"{"); err != nil {
			t.Fatal(err)
		}
		held[i] = c
	}
	for i, c := range held {
		if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
			t.Fatal(err)
		}
		// Whatever it answers first (a 400 for the body cut short), the
		// server must close the connection.
		_, err := io.Copy(io.Discard, c)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("connection %d: still open 30 s after a body stalled, with handshake_timeout = 1s", i)
		}
	}

	// A report whose body comes in two writes, within the timeout.
	c, err := net.Dial("tcp", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"class": "refused", "detail": "sent in two writes"}`
	req := strings.Replace(head, "Content-Length: 100", "Content-Length: "+strconv.Itoa(len(body)), 1)
	if _, err := io.WriteString(c, req+body[:10]); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, body[10:]); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a whole report: status %d, want 200", resp.StatusCode)
	}
}
