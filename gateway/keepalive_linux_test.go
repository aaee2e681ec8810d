package gateway

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sockopt reads an integer option of c's socket.
func sockopt(t *testing.T, c net.Conn, level, opt int) int {
	t.Helper()
	rc, err := tcpOf(c).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), level, opt) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v
}

// tcpPair returns both ends of a loopback TCP connection; the dialled end
// has keep-alive off, as the gateway dials upstreams.
func tcpPair(t *testing.T, ln net.Listener) (dialled, accepted net.Conn) {
	t.Helper()
	d := net.Dialer{KeepAlive: -1}
	c, err := d.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); a.Close() })
	return c, a
}

// Accepted connections inherit the front listener's keep-alive settings
// (Go's values), although Go no longer sets them per connection.
func TestFrontConnectionsHaveKeepAlive(t *testing.T) {
	ln, err := listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_, a := tcpPair(t, ln)
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 9},
	} {
		if got := sockopt(t, a, o.level, o.opt); got != o.want {
			t.Errorf("accepted connection: %s = %d, want %d", o.name, got, o.want)
		}
	}
}

// The watchdog's first check turns keep-alive on for the upstream side of
// a tunnel, which was dialled without it.
func TestWatchdogTurnsOnUpstreamKeepAlive(t *testing.T) {
	setHalfCloseLinger(400 * time.Millisecond) // checks every 100 ms
	t.Cleanup(func() { setHalfCloseLinger(60 * time.Second) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, _ := tcpPair(t, ln)
	up, _ := tcpPair(t, ln)
	if sockopt(t, up, unix.SOL_SOCKET, unix.SO_KEEPALIVE) != 0 {
		t.Fatal("upstream side has keep-alive before the watchdog ran")
	}
	w := startWatchdog(client, up, 0, 0, nil, func(watchEnd) {})
	if w == nil {
		t.Fatal("no watchdog on Linux")
	}
	defer w.stop()
	deadline := time.Now().Add(5 * time.Second)
	for sockopt(t, up, unix.SOL_SOCKET, unix.SO_KEEPALIVE) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("upstream side has no keep-alive 5s after the watchdog started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := sockopt(t, up, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE); got != 15 {
		t.Errorf("upstream TCP_KEEPIDLE = %d, want 15", got)
	}
}
