//go:build unix

package gateway

import (
	"crypto/tls"
	"net"

	"golang.org/x/sys/unix"
)

// idleReadable reports whether an idle kept-alive connection to an
// upstream or target has bytes or an end waiting: a server that sent
// more than its answer's framing said (or closed) must not have those
// bytes read as the answer to the next request, someone else's maybe.
// net/http's Transport notices the same with a reader per connection
// ("Unsolicited response received on idle HTTP channel"); here one
// non-blocking peek at reuse does, and the idle sweep's (idleGone). A
// connection with TLS over it is not peeked at: the server's own records
// (session tickets) may come unasked.
func idleReadable(c net.Conn) bool { return idlePeek(c, false) }

// idleGone is idleReadable for the idle sweep (fwdClient.sweepIdle),
// which also looks under TLS: a connection whose peer ended its side
// (FIN or reset) is of no use whatever records came before the end, and
// left alone it would sit in CLOSE-WAIT until reused or fwdIdleTimeout.
func idleGone(c net.Conn) bool { return idlePeek(c, true) }

// idlePeek is idleReadable, and with underTLS idleGone.
func idlePeek(c net.Conn, underTLS bool) bool {
	overTLS := false
	for i := 0; i < 4 && c != nil; i++ {
		switch cc := c.(type) {
		case *tls.Conn:
			if !underTLS {
				return false
			}
			overTLS = true
			c = cc.NetConn()
			continue
		case *net.TCPConn:
			rc, err := cc.SyscallConn()
			if err != nil {
				return true
			}
			readable := false
			if err := rc.Control(func(fd uintptr) {
				if overTLS {
					readable = peerEnded(int(fd))
					return
				}
				var b [1]byte
				n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
				readable = n > 0 || (n == 0 && err == nil) || (err != nil && err != unix.EAGAIN && err != unix.EINTR)
			}); err != nil {
				return true
			}
			return readable
		}
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return false
		}
		c = nc.NetConn()
	}
	return false
}
