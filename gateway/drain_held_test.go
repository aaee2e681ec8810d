package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestShutdownCutReleasesHeldAnswer: a forwarded request holding a
// retry-status answer (pool.retry_statuses) from one upstream while it
// tries another, cut there by the drain, ends the use of both upstreams.
// Bug: the drain-cut path released the upstream it was on and dropped
// the held answer without closing it or releasing its upstream, which
// stayed in use (active 1) for good.
func TestShutdownCutReleasesHeldAnswer(t *testing.T) {
	var n atomic.Int64
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		if n.Add(1) == 1 {
			fmt.Fprintf(c, "HTTP/1.1 429 Too Many Requests\r\nContent-Length: 0\r\n\r\n")
		}
		_, _ = io.Copy(io.Discard, c) // the second one is never answered: until rotor closes
	})
	socks := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	conf := "allow_private_destinations = true\n[pool]\nstart_eligible = true\nretry_statuses = [429]\n" +
		"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
		"[[upstream]]\nurl = \"socks5://" + socks.Addr() + "\"\nname = \"socks\"\n" +
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"
	srv, logs := newGateway(t, "drain.toml", conf)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET http://%s/ban HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	// Both upstreams are in use: the first one's 429 held, the second
	// one's request waiting for its answer.
	waitFor(t, func() bool { return n.Load() == 2 })
	active := func() int64 { return srv.Pool().Lookup("direct").Active() + srv.Pool().Lookup("socks").Active() }
	if got := active(); got != 2 {
		t.Fatalf("%d upstreams in use while the request waits on its second, want 2", got)
	}
	shutdownGraceOver(t, srv)
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err == nil {
		resp.Body.Close()
	}
	// The handler may end a moment after Shutdown returns: give it 5s.
	for i := 0; i < 500 && active() != 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := active(); got != 0 {
		t.Errorf("after the drain cut the request, %d upstreams are still in use, want 0:\n%s", got, logs)
	}
}
