package gateway

import "golang.org/x/sys/unix"

// peerEnded reports whether the peer of socket fd ended its side (a FIN,
// POLLRDHUP, even behind unread bytes) or the connection failed (a reset,
// POLLHUP or POLLERR). It does not block.
func peerEnded(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0 && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP|unix.POLLERR) != 0
}
