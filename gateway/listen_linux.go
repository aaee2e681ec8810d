package gateway

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	// dialKeepAlive leaves keep-alive off on upstream connections: the
	// tunnel watchdog turns it on when a tunnel proves long-lived
	// (enableKeepAlive).
	dialKeepAlive = -1
	// listenKeepAlive stops Go's per-connection keep-alive calls; the
	// listening socket carries the settings (setListenerKeepAlive).
	listenKeepAlive = -1
)

// setListenerKeepAlive sets tcpKeepAlive on a listening socket. Linux
// copies these options to every socket accept returns, so accepted
// connections are probed exactly as Go would probe them without four
// setsockopt calls each (ListenConfig.KeepAlive is -1 to stop Go's).
func setListenerKeepAlive(_, _ string, rc syscall.RawConn) error {
	var err error
	cerr := rc.Control(func(fd uintptr) {
		for _, o := range []struct{ level, opt, v int }{
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(tcpKeepAlive.Idle.Seconds())},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(tcpKeepAlive.Interval.Seconds())},
			{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, tcpKeepAlive.Count},
		} {
			if err = unix.SetsockoptInt(int(fd), o.level, o.opt, o.v); err != nil {
				return
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// readNow reads what c has already received into p without waiting (a
// non-blocking read(2)); 0 when nothing is there or on any error.
func readNow(c net.Conn, p []byte) int {
	n := 0
	withFD(c, func(rc syscall.RawConn) {
		_ = rc.Read(func(fd uintptr) bool {
			if m, err := unix.Read(int(fd), p); err == nil && m > 0 {
				n = m
			}
			return true // never wait for more
		})
	})
	return n
}

// writeNow writes p to c without waiting for room (a non-blocking
// write(2)): best effort, for a refusal the accept loop writes itself. A
// fresh connection's empty send buffer takes a few bytes whole.
func writeNow(c net.Conn, p []byte) {
	withFD(c, func(rc syscall.RawConn) {
		_ = rc.Write(func(fd uintptr) bool {
			_, _ = unix.Write(int(fd), p)
			return true
		})
	})
}

func withFD(c net.Conn, f func(syscall.RawConn)) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return
	}
	if rc, err := sc.SyscallConn(); err == nil {
		f(rc)
	}
}
