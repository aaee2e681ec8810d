package gateway

import (
	"net"
	"sync"
)

// handshakes holds the SOCKS5 front's connections that have no tunnel
// yet: still in their handshake, or being refused over a connection
// limit. The drain closes them at once (Shutdown): they have nothing to
// finish, and waiting for each to end by itself would hold the exit until
// listen.handshake_timeout, past shutdown_grace and a second signal, for
// clients that never send a byte. The HTTP front closes its idle
// keep-alives the same way (h1Front.shutdown).
type handshakes struct {
	mu      sync.Mutex // guards the fields below
	closing bool       // the drain began: no connection is added any more
	conns   map[net.Conn]struct{}
}

// add registers c. It returns false, and closes c, once the drain began.
func (h *handshakes) add(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		_ = c.Close()
		return false
	}
	if h.conns == nil {
		h.conns = map[net.Conn]struct{}{}
	}
	h.conns[c] = struct{}{}
	return true
}

// done removes c when its handshake is over. It returns false when the
// drain closed c first.
func (h *handshakes) done(c net.Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.conns[c]; !ok {
		return false
	}
	delete(h.conns, c)
	return true
}

// closeAll closes every registered connection and refuses later ones.
func (h *handshakes) closeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closing = true
	for c := range h.conns {
		_ = c.Close()
	}
	clear(h.conns)
}
