package gateway

import (
	"net"
	"sync"
)

// connLimits enforces listen.max_connections per front and
// listen.max_connections_per_ip across fronts.
type connLimits struct {
	perFront int
	perIP    int

	mu    sync.Mutex // guards the maps
	front map[string]int
	ip    map[string]int
}

func newConnLimits(perFront, perIP int) *connLimits {
	return &connLimits{perFront: perFront, perIP: perIP, front: map[string]int{}, ip: map[string]int{}}
}

// acquire counts c against the limits. It returns a release func and
// whether c is within them (release is a no-op when it is not).
func (l *connLimits) acquire(front string, c net.Conn) (func(), bool) {
	if l == nil || (l.perFront == 0 && l.perIP == 0) {
		return func() {}, true
	}
	ip := hostOf(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perFront > 0 && l.front[front] >= l.perFront {
		return func() {}, false
	}
	if l.perIP > 0 && l.ip[ip] >= l.perIP {
		return func() {}, false
	}
	l.front[front]++
	l.ip[ip]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.front[front]--
			if l.ip[ip]--; l.ip[ip] <= 0 {
				delete(l.ip, ip)
			}
			l.mu.Unlock()
		})
	}, true
}

func hostOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return h
}
