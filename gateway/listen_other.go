//go:build !linux

package gateway

import "syscall"

// Off Linux accepted sockets are not known to inherit the listener's
// keep-alive settings, and no watchdog runs: Go's defaults stay.
const (
	dialKeepAlive   = 0
	listenKeepAlive = 0
)

var setListenerKeepAlive func(network, address string, c syscall.RawConn) error
