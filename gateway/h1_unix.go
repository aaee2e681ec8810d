//go:build unix

package gateway

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// peekClient peeks at c without consuming anything: queued bytes or
// nothing yet mean the client is there (peerOpen); an orderly close of
// its sending side (EOF) is peerEOF, which a client that half-closed
// after its request and still reads looks like as much as one that left;
// a reset or another error, or a socket rotor closed itself, is peerGone.
func peekClient(c net.Conn) peerState {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peerOpen
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peerOpen
	}
	st := peerOpen
	if err := rc.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case n == 0 && err == nil:
			st = peerEOF
		case err != nil && err != unix.EAGAIN && err != unix.EINTR:
			st = peerGone
		}
	}); err != nil {
		return peerGone // closed by rotor itself
	}
	return st
}
