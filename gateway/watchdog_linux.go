package gateway

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

type tcpCounter struct{ c *net.TCPConn }

// tcpClose is TCP_CLOSE in tcpi_state (include/net/tcp_states.h): the
// state a socket rotor still holds is in once the kernel ended its
// connection (tcp_reset, tcp_done).
const tcpClose = 7

// stats reads TCP_INFO: tcpi_bytes_received (Linux 4.1+), the bytes the
// peer sent that the kernel accepted, whether or not rotor has read them
// yet; tcpi_last_data_recv and tcpi_last_data_sent, how long ago data last
// arrived and last left (in jiffies, reported in ms); tcpi_retransmits,
// the timeouts in a row without an acknowledgement; tcpi_state.
func (t tcpCounter) stats() (tcpStats, bool) {
	rc, err := t.c.SyscallConn()
	if err != nil {
		return tcpStats{}, false
	}
	var st tcpStats
	var ok bool
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			ok = true
			st = tcpStats{rxBytes: info.Bytes_received,
				lastRecv: time.Duration(info.Last_data_recv) * time.Millisecond,
				lastSent: time.Duration(info.Last_data_sent) * time.Millisecond,
				rto:      info.Retransmits > 0,
				closed:   info.State == tcpClose}
		}
	})
	return st, ok
}
