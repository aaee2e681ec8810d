package gateway

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestForwardSmallBodyStillArrivingIsRead: a small request body (one rotor
// buffers for retries) that keeps arriving, a little at a time, for longer
// than listen.handshake_timeout in all is read and forwarded: the bound is
// on the silence between its bytes (handshake_timeout), as the 408 says.
// rotor used to give the whole body one deadline of handshake_timeout and
// answer 408 "no bytes for 1s" to a client that had sent bytes the moment
// before.
func TestForwardSmallBodyStillArrivingIsRead(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	srv, logs := newGateway(t, "small.toml", fmt.Sprintf("[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"+
		"handshake_timeout = \"1s\"\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"a\"\n", up.URL()))
	serve(t, srv)
	body := bytes.Repeat([]byte("0123456789abcdef"), 640) // 10 KiB
	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", target.URL("/echo"), target.Addr(), len(body))
	for chunk := range slices.Chunk(body, 1024) { // 10 chunks, 250 ms apart: 2.5 s in all
		time.Sleep(250 * time.Millisecond)
		if _, err := c.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	r, got := h1Read(t, br, http.MethodPost)
	if r.StatusCode != http.StatusOK || got != string(body) {
		t.Fatalf("answer %d %q (%d body bytes), want 200 echoing the %d bytes", r.StatusCode, r.Header.Get("X-Rotor-Error"), len(got), len(body))
	}
	if line := forwardLine(t, logs); !strings.Contains(line, `"outcome":"ok"`) {
		t.Errorf("log line %s, want outcome ok", line)
	}

	// A body that stops is still told so, truly.
	c, br = h1Dial(t, srv)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 10\r\n\r\nabc", target.URL("/echo"), target.Addr())
	r, got = h1Read(t, br, http.MethodPost)
	if r.StatusCode != http.StatusRequestTimeout || !strings.Contains(got, "no bytes for 1s") {
		t.Fatalf("answer %d %q, want 408 saying no bytes came for 1s", r.StatusCode, got)
	}
}
