//go:build !linux

package gateway

import (
	"net"
	"time"
)

// sentWithin cannot tell here: sendLimit judges progress by the bytes
// each write took.
func sentWithin(net.Conn, time.Duration) (sent, ok bool) { return false, false }
