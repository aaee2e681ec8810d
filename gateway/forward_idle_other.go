//go:build !unix

package gateway

import "net"

// idleReadable cannot peek at a socket here: an idle connection's
// unsolicited bytes are found only when the next answer is read.
func idleReadable(net.Conn) bool { return false }

// idleGone cannot either: an idle connection its peer closed is found
// closed when it is next used, or dropped after fwdIdleTimeout.
func idleGone(net.Conn) bool { return false }
