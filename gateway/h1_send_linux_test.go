package gateway

import (
	"net"
	"testing"
	"time"
)

// sentWithin tells from the socket whether data left it lately: the send
// limit's measure of a client taking its answer.
func TestSentWithin(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if sent, ok := sentWithin(c, time.Minute); !ok || !sent {
		t.Errorf("sentWithin(a minute) = %v, %v after a write, want true, true", sent, ok)
	}
	if sent, ok := sentWithin(c, 100*time.Millisecond); !ok || sent {
		t.Errorf("sentWithin(100ms) = %v, %v 300ms after the last write, want false, true", sent, ok)
	}
	if _, ok := sentWithin(&net.TCPConn{}, time.Minute); ok {
		t.Errorf("sentWithin on a conn with no socket says ok")
	}
}
