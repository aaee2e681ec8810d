package gateway

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestForwardMaxConnsBoundsOpenConnections: an upstream's max_conns
// bounds the connections rotor holds open to it for plain-HTTP
// forwarding, idle kept-alive ones included (a provider counts every
// open connection). With max_conns = 1, requests to three targets in
// turn leave one connection open, not one per target; a request to the
// target of the idle connection still reuses it. The Transport path
// (POST) makes room the same way and keeps nothing idle itself.
func TestForwardMaxConnsBoundsOpenConnections(t *testing.T) {
	var open atomic.Int64 // target connections not yet closed, all targets
	ok := serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
	handle := func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		open.Add(1)
		defer open.Add(-1)
		ok(c, br, rt) // until the tunnel through the upstream closes
	}
	targets := []*rawTarget{newRawTarget(t, handle), newRawTarget(t, handle), newRawTarget(t, handle)}
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"up\"\nmax_conns = 1\n", up.URL()))
	get := func(method string, rt *rawTarget) {
		t.Helper()
		resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
		if err != nil || resp.StatusCode != 200 || body != "ok\n" {
			t.Fatalf("%s %s: got %s %q %v", method, rt.Addr(), statusOf(resp), body, err)
		}
	}
	atMostOne := func(after string) {
		t.Helper()
		eventuallyTrue(t, "at most 1 open connection through the upstream after "+after, func() bool { return open.Load() <= 1 })
	}
	for i, rt := range targets {
		get(http.MethodGet, rt)
		atMostOne(fmt.Sprintf("GET %d", i+1))
	}
	get(http.MethodGet, targets[2])
	if got := targets[2].accepts.Load(); got != 1 {
		t.Errorf("target 3 connections = %d, want 1: its idle connection was reusable", got)
	}
	get(http.MethodPost, targets[0])
	atMostOne("a POST")
	get(http.MethodGet, targets[2])
	if got := targets[2].accepts.Load(); got != 2 {
		t.Errorf("target 3 connections = %d, want 2: its idle connection was closed to make room for the POST's", got)
	}
	atMostOne("a GET after the POST")
	// A tunnel through the upstream makes room too: the GET's idle
	// connection is closed before the tunnel dials.
	c, br := rawSOCKS(t, srv.Addr("socks5"), targets[1].Addr(), []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
		t.Fatalf("through the tunnel: %v %v", statusOf(r), err)
	}
	atMostOne("a tunnel after the GETs")
	c.Close()
	eventuallyTrue(t, "the tunnel's end", func() bool { return srv.Pool().Lookup("up").Active() == 0 })
	if a := srv.Pool().Lookup("up").Active(); a != 0 {
		t.Errorf("active = %d after the requests, want 0", a)
	}
	noFailures(t, srv, "up")
}

// closeRecorder is a net.Conn that only records whether it was closed.
type closeRecorder struct {
	net.Conn
	closed atomic.Bool
}

func (c *closeRecorder) Close() error { c.closed.Store(true); return nil }

// TestFwdClientTrimIdle: trimIdle closes the oldest idle connections,
// over all targets, until at most keep remain.
func TestFwdClientTrimIdle(t *testing.T) {
	fc := &fwdClient{idle: map[string][]*fwdConn{}}
	base := time.Now()
	var conns []*closeRecorder
	for i, key := range []string{"a", "b", "a", "c", "b"} { // oldest first
		c := &closeRecorder{}
		conns = append(conns, c)
		fc.idle[key] = append(fc.idle[key], &fwdConn{c: c, key: key, idleAt: base.Add(time.Duration(i) * time.Second)})
		fc.nidle++
	}
	fc.trimIdle(2)
	for i, c := range conns {
		if want := i < 3; c.closed.Load() != want {
			t.Errorf("connection %d closed = %v, want %v (the two newest are kept)", i, c.closed.Load(), want)
		}
	}
	if fc.nidle != 2 || len(fc.idle["a"]) != 0 || len(fc.idle["b"]) != 1 || len(fc.idle["c"]) != 1 {
		t.Errorf("after trimIdle(2): nidle %d, idle %v", fc.nidle, fc.idle)
	}
	if _, ok := fc.idle["a"]; ok {
		t.Error("an emptied target is still a key of the idle map")
	}
	fc.trimIdle(5) // nothing to do
	if fc.nidle != 2 {
		t.Errorf("trimIdle(5) changed nidle to %d", fc.nidle)
	}
	fc.trimIdle(0)
	if fc.nidle != 0 || len(fc.idle) != 0 || !conns[3].closed.Load() || !conns[4].closed.Load() {
		t.Errorf("after trimIdle(0): nidle %d, %d keys left", fc.nidle, len(fc.idle))
	}
}
