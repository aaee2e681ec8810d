package gateway

import (
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
)

// answeredConn is a connection of a Transport's (forward_conns.go) that
// lets an early answer through: an upstream (or a target through it) may
// answer a request before its body is all sent, a 413 or a 401, and then
// reset the connection, as tinyproxy relays a target that does so. The
// Transport then has the answer and a failed write at once, and picks
// one at random: the failed write made a 502 target_unreachable of an
// answer that had come, and cooled the upstream for the host. Once bytes
// of an answer came, a write that fails because the peer reset or closed
// (ECONNRESET, EPIPE) is taken as written, and so is every later one (they
// go nowhere): the Transport returns the answer, or, when its head was
// not all there, the read's error.
type answeredConn struct {
	net.Conn
	// rmu is held by each Read (the Transport's reader goroutine): a
	// write that failed waits for a read under way, which on a reset
	// connection returns at once, to know what it brought.
	rmu      sync.Mutex
	answered atomic.Bool // a byte came from the peer
	broken   atomic.Bool // a write failed after that: later writes are dropped
	wfailed  atomic.Bool // a write failed (taken as written or not): the connection ended while a request was sent
	fields   syncFields  // the Connection fields of the answer's head (connTrace begins it, roundTripTransport keeps them)
}

// answeredOf returns the answeredConn under c, a connection a Transport
// dialled (httptrace's GotConnInfo.Conn), or nil.
func answeredOf(c net.Conn) *answeredConn {
	for range 3 {
		switch cc := c.(type) {
		case *answeredConn:
			return cc
		case *notHTTPConn:
			c = cc.Conn
		default:
			return nil
		}
	}
	return nil
}

// writeFailed reports whether a write on c failed: the connection ended
// (closed by the peer, reset, or torn down by the Transport after its
// reader met that end) while a request was being sent on it.
func (c *answeredConn) writeFailed() bool { return c != nil && c.wfailed.Load() }

// letEarlyAnswers wraps c, a new connection of a Transport's, in an
// answeredConn (nil stays nil).
func letEarlyAnswers(c net.Conn) net.Conn {
	if c == nil {
		return nil
	}
	return &answeredConn{Conn: c}
}

func (c *answeredConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered.Store(true)
		c.fields.feed(p[:n])
	}
	return n, err
}

func (c *answeredConn) Write(p []byte) (int, error) {
	if c.broken.Load() {
		return len(p), nil
	}
	n, err := c.Conn.Write(p)
	if err != nil {
		c.wfailed.Store(true)
	}
	if err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) && c.answerCame() {
		c.broken.Store(true)
		return len(p), nil
	}
	return n, err
}

// answerCame reports whether bytes of an answer came, read already or
// still queued in the socket: the Transport's reader may not have run yet
// when its writer meets the reset. After a failed write a peek sees
// queued bytes as open (peekClient), and nothing as an end or an error;
// where it cannot tell (not a socket, not unix) only what was read counts.
func (c *answeredConn) answerCame() bool {
	c.rmu.Lock() // a read under way ends first (its bytes may be the answer)
	c.rmu.Unlock()
	if c.answered.Load() {
		return true
	}
	if _, ok := c.Conn.(syscall.Conn); !ok || runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		return false
	}
	return peekClient(c.Conn) == peerOpen
}
