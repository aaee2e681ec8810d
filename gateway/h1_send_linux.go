package gateway

import (
	"net"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sentWithin reports whether the socket under c sent data to its peer in
// the last d (TCP_INFO tcpi_last_data_sent, in jiffies reported in ms: a
// send within 10 ms of d ago does not count). A zero-window probe carries
// no data and does not count; a retransmission does, except into a window
// the peer shrank to zero (refusingRetransmits): those go on for as long
// as the peer acknowledges them and deliver nothing. ok is false when the
// socket cannot tell.
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
		info, n, err := tcpInfo(fd)
		if err == nil {
			ok = true
			sent = time.Duration(info.Last_data_sent)*time.Millisecond+10*time.Millisecond < d &&
				!refusingRetransmits(&info, n)
		}
	})
	return sent, ok
}

// refusingRetransmits reports whether the socket is retransmitting into a
// window its peer shrank to zero: data is in flight (tcpi_unacked), the
// peer's window is 0 (tcpi_snd_wnd, Linux 5.4+: n, the bytes the kernel
// filled, says whether it is there) and the retransmission timer has
// backed off (tcpi_backoff). A client that shrinks its receive buffer
// after connecting (SO_RCVBUF 4 KiB) and reads nothing drops what was
// already in flight; Linux retransmits it with the timeout doubling up to
// 120 s for as long as the peer acknowledges (tcp_retransmit_timer: "our
// retransmits become zero probes"), and never times the connection out.
// Each retransmission stamps tcpi_last_data_sent, so they looked like a
// client taking its answer: measured on loopback, such a client stayed
// connected about 180 s under the 60 s send limit. Nothing it acknowledges
// is new (tcpi_bytes_acked stands still). A normal receiver never shrinks
// its window, so a slow reader waits in zero-window probes with nothing
// unacknowledged and is judged by its real sends.
func refusingRetransmits(info *unix.TCPInfo, n int) bool {
	if n < int(unsafe.Offsetof(info.Snd_wnd)+unsafe.Sizeof(info.Snd_wnd)) {
		return false // an older kernel: no tcpi_snd_wnd
	}
	return info.Snd_wnd == 0 && info.Unacked > 0 && info.Backoff > 0
}

// tcpInfo reads TCP_INFO like unix.GetsockoptTCPInfo, and returns how many
// bytes of it the kernel filled (older kernels fill fewer fields).
func tcpInfo(fd uintptr) (unix.TCPInfo, int, error) {
	var info unix.TCPInfo
	n := uint32(unsafe.Sizeof(info))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
		uintptr(unsafe.Pointer(&info)), uintptr(unsafe.Pointer(&n)), 0)
	if e != 0 {
		return info, 0, e
	}
	return info, int(n), nil
}
