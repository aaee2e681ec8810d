package upstream

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// keepAliveOn reads SO_KEEPALIVE of c's socket.
func keepAliveOn(t *testing.T, c net.Conn) bool {
	t.Helper()
	tc, ok := c.(*net.TCPConn)
	if !ok {
		t.Fatalf("conn is %T, want *net.TCPConn", c)
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	var gerr error
	if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_KEEPALIVE) }); err != nil {
		t.Fatal(err)
	}
	if gerr != nil {
		t.Fatal(gerr)
	}
	return v != 0
}

// DialConfig.KeepAlive reaches the dialled socket: 0 is Go's default (on),
// negative leaves it off for the gateway to turn on later.
func TestDialKeepAlive(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	for _, tt := range []struct {
		url  string
		ka   time.Duration
		want bool
	}{
		{"direct://", 0, true},
		{"direct://", -1, false},
		{up.URL().String(), 0, true},
		{up.URL().String(), -1, false},
	} {
		cfg := testCfg()
		cfg.KeepAlive = tt.ka
		c, err := dial(t, mustDialer(t, mustURL(t, tt.url), cfg), target.Addr())
		if err != nil {
			t.Fatalf("%s: %v", tt.url, err)
		}
		if got := keepAliveOn(t, c); got != tt.want {
			t.Errorf("%s with KeepAlive %d: SO_KEEPALIVE %v, want %v", tt.url, tt.ka, got, tt.want)
		}
		roundTrip(t, c)
	}
}
