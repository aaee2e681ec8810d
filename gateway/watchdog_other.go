//go:build !linux

package gateway

import "net"

type tcpCounter struct{ c *net.TCPConn }

// stats is unavailable off Linux: the watchdog stays off.
func (t tcpCounter) stats() (tcpStats, bool) { return tcpStats{}, false }
