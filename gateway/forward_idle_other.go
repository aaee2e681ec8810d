//go:build !unix

package gateway

import "net"

// idleReadable cannot peek at a socket here: an idle connection's
// unsolicited bytes are found only when the next answer is read.
func idleReadable(net.Conn) bool { return false }
