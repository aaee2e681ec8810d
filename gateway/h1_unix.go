//go:build unix

package gateway

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// clientGone peeks at c without consuming anything: an orderly close
// (EOF) or a reset means the client left; queued bytes or nothing yet
// mean it is still there.
func clientGone(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	if err := rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		gone = (n == 0 && err == nil) || (err != nil && err != unix.EAGAIN && err != unix.EINTR)
	}); err != nil {
		return true // closed by rotor itself
	}
	return gone
}
