//go:build !linux

package gateway

import (
	"net"
	"syscall"
	"time"
)

// Off Linux accepted sockets are not known to inherit the listener's
// keep-alive settings, and no watchdog runs: Go's defaults stay.
const (
	dialKeepAlive   = 0
	listenKeepAlive = 0
)

var setListenerKeepAlive func(network, address string, c syscall.RawConn) error

// readNow reads nothing off Linux: every over-limit refusal converses
// (refuseSOCKSSlowly) or is closed.
func readNow(net.Conn, []byte) int { return 0 }

// writeNow writes p to c, bounded by a short deadline.
func writeNow(c net.Conn, p []byte) {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
	_, _ = c.Write(p)
}
