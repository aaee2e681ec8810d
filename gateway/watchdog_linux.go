package gateway

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

type tcpCounter struct{ c *net.TCPConn }

// rx returns tcpi_bytes_received (Linux 4.1+): bytes the peer sent that
// the kernel accepted, whether or not rotor has read them yet; and
// tcpi_last_data_recv: how long ago the last data arrived.
func (t tcpCounter) rx() (uint64, time.Duration, bool) {
	rc, err := t.c.SyscallConn()
	if err != nil {
		return 0, 0, false
	}
	var n uint64
	var ago time.Duration
	var ok bool
	_ = rc.Control(func(fd uintptr) {
		info, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err == nil {
			n, ok = info.Bytes_received, true
			ago = time.Duration(info.Last_data_recv) * time.Millisecond
		}
	})
	return n, ago, ok
}
