package gateway

import (
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sentWithin tells from the socket whether data left it lately: the send
// limit's measure of a client taking its answer.
func TestSentWithin(t *testing.T) {
	c, _ := loopbackPair(t)
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

// A client that shrinks its receive buffer after connecting and reads
// nothing leaves data in flight beyond its window: Linux retransmits it
// with a doubling timeout (up to 120 s) for as long as the client's
// kernel acknowledges, and each retransmission stamps the socket's last
// data sent. Those deliver nothing and are not the client taking its
// answer. They counted: such a client stayed connected ~180 s under the
// 60 s send limit (README said "up to about 120 s").
func TestSentWithinIgnoresRetransmitsIntoShrunkWindow(t *testing.T) {
	client, c := loopbackPair(t)
	if err := client.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer func() { c.Close(); <-done }()
	go func() { // owner: this test; ends when c closes
		defer close(done)
		buf := make([]byte, 64<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	info := func() unix.TCPInfo {
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var i *unix.TCPInfo
		_ = rc.Control(func(fd uintptr) { i, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) })
		if err != nil {
			t.Fatal(err)
		}
		return *i
	}
	// Wait for a retransmission into the shrunk window within the last
	// second (the first come within ~5 s: 0.2, 0.6, 1.4, 3 s…).
	deadline := time.Now().Add(60 * time.Second)
	for {
		i := info()
		if i.Snd_wnd == 0 && i.Unacked > 0 && i.Backoff >= 2 && i.Last_data_sent < 1000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no retransmission into a shrunk window within 60s (last TCP_INFO %+v)", i)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if sent, ok := sentWithin(c, 5*time.Second); !ok || sent {
		t.Errorf("sentWithin(5s) = %v, %v right after a retransmission into a zero window, want false, true", sent, ok)
	}
	// What the client's kernel took before it shrank counts as taken:
	// bytes_acked stands still from then on.
	if i := info(); i.Bytes_acked == 0 {
		t.Errorf("bytes_acked = 0: the client's kernel took nothing before its buffer shrank")
	}
}
