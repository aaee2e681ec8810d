package gateway

import (
	"context"
	"net"
)

// listen opens a front's TCP listener. Its accepted connections have TCP
// keep-alive on (tcpKeepAlive); on Linux they inherit it from the
// listening socket instead of paying setsockopt calls per connection.
func listen(addr string) (net.Listener, error) {
	lc := net.ListenConfig{KeepAlive: listenKeepAlive, Control: setListenerKeepAlive}
	return lc.Listen(context.Background(), "tcp", addr)
}
