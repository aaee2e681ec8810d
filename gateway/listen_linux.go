package gateway

import (
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
