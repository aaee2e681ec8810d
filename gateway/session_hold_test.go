package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rotor-proxy/rotor/upstream"
)

// TestForwardHoldsSession: a plain-HTTP forwarded request of a sticky
// session holds it for as long as it lasts, as a tunnel does: with
// session_ttl 1s, a request whose answer takes longer keeps the binding,
// whose TTL slides from the request's end. Bug: the forwarded path
// released its upstream with Pool.Release, the session was not held, and
// it expired under the request.
func TestForwardHoldsSession(t *testing.T) {
	arrived, finish := make(chan struct{}), make(chan struct{})
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "do")
		w.(http.Flusher).Flush()
		close(arrived)
		<-finish
		_, _ = io.WriteString(w, "ne")
	}))
	t.Cleanup(target.Close)
	t.Cleanup(func() {
		select {
		case <-finish:
		default:
			close(finish)
		}
	})
	text := "allow_private_destinations = true\n[pool]\nstart_eligible = true\nsession_ttl = \"1s\"\n" +
		"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"
	cfg, err := ParseConfig("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	clk := healthtest.NewClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	srv, err := New(cfg, Options{Log: zerolog.New(logs), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	id := upstream.SessionID("u", "hold1")

	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	auth := "dS1zZXNzaW9uLWhvbGQxOng=" // base64("u-session-hold1:x")
	fmt.Fprintf(c, "GET %s/long HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", target.URL, target.Listener.Addr(), auth)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-arrived
	first := make([]byte, 2)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err) // the answer has started: the request is in flight
	}
	key := srv.Pool().SessionKey(id)
	if key == "" {
		t.Fatal("the session is not bound while its request is answered")
	}
	clk.Advance(3 * time.Second) // past the TTL, the answer still coming
	if got := srv.Pool().SessionKey(id); got != key {
		t.Errorf("with its request in flight past session_ttl the session is bound to %q, want %q", got, key)
	}
	close(finish)
	body, err := io.ReadAll(io.LimitReader(resp.Body, 2))
	if err != nil || string(first)+string(body) != "done" {
		t.Fatalf("body %q, %v", body, err)
	}
	resp.Body.Close()
	c.Close()
	// The request's end is its last use: the TTL slides from there.
	waitFor(t, func() bool { return srv.Pool().Lookup("direct").Active() == 0 })
	clk.Advance(1500 * time.Millisecond)
	if got := srv.Pool().SessionKey(id); got != "" {
		t.Errorf("the session outlived its TTL after its request ended: bound to %q", got)
	}
}
