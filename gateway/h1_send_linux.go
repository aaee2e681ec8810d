package gateway

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// sentWithin reports whether the socket under c sent data to its peer in
// the last d (TCP_INFO tcpi_last_data_sent, in jiffies reported in ms: a
// send within 10 ms of d ago does not count). A zero-window probe carries
// no data and does not count; a retransmission does. ok is false when
// the socket cannot tell.
func sentWithin(c net.Conn, d time.Duration) (sent, ok bool) {
	tc := tcpOf(c)
	if tc == nil {
		return false, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false, false
	}
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			ok = true
			sent = time.Duration(info.Last_data_sent)*time.Millisecond+10*time.Millisecond < d
		}
	})
	return sent, ok
}
