//go:build !linux

package gateway

import (
	"io"
	"net"
)

// copyTCP is io.Copy off Linux.
func copyTCP(dst, src *net.TCPConn) (int64, error) { return io.Copy(dst, src) }
