package gateway

import (
	"net"
	"time"
)

// tcpKeepAlive is what rotor's sockets use, Go's own default: the first
// probe after 15s of silence, then every 15s, 9 unanswered probes end it.
var tcpKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 15 * time.Second, Count: 9}

// enableKeepAlive turns TCP keep-alive on for the socket under c. Upstream
// connections are dialled without it (upstream.DialConfig.KeepAlive < 0)
// and get it here once the tunnel outlives the watchdog's first check: a
// short tunnel then costs no setsockopt calls for it, a long one is
// probed as Go would have done from the start, only a few seconds later.
func enableKeepAlive(c net.Conn) {
	if tc := tcpOf(c); tc != nil {
		_ = tc.SetKeepAliveConfig(tcpKeepAlive)
	}
}

// tcpOf finds the TCP socket under c (through TLS and rotor's own
// buffered wrappers), or nil.
func tcpOf(c net.Conn) *net.TCPConn {
	for i := 0; i < 4 && c != nil; i++ {
		if tc, ok := c.(*net.TCPConn); ok {
			return tc
		}
		nc, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = nc.NetConn()
	}
	return nil
}
