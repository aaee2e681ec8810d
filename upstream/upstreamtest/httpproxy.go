package upstreamtest

import (
	"bufio"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
)

// NewHTTPProxy starts a fake HTTP proxy: CONNECT tunnels, and absolute-URI
// plain requests forwarded one per connection. With opts.Username set it
// requires Proxy-Authorization: Basic (407 otherwise, like squid). A refused
// target gets squid's answer (503 + X-Squid-Error: ERR_CONNECT_FAIL 111,
// 110 for a timeout). With opts.TLS it serves https://; use ClientTLS.
func NewHTTPProxy(t testing.TB, opts Options) *Server {
	t.Helper()
	scheme := "http"
	var serverTLS *tls.Config
	if opts.TLS {
		scheme = "https"
		serverTLS = newServerTLS(t)
	}
	return newServer(t, scheme, opts, handleHTTP, serverTLS)
}

var defaultHTTPGarbage = []byte("\x05\x00this is not HTTP\r\n\r\n")

func handleHTTP(s *Server, c net.Conn, m *Mode) {
	switch m.Fault {
	case CloseAfterAccept:
		return
	case BlackHole:
		drain(c)
		return
	case Garbage:
		var b [512]byte
		if _, err := c.Read(b[:]); err != nil {
			return
		}
		g := m.Garbage
		if g == nil {
			g = defaultHTTPGarbage
		}
		_, _ = c.Write(g)
		drain(c)
		return
	}
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"))
		return
	}
	if m.Fault == RejectAuth || m.Fault == NoAcceptableMethod || !s.authorized(req) {
		s.authFails.Add(1)
		writeStatus(c, http.StatusProxyAuthRequired, "", http.Header{
			"Proxy-Authenticate": {`Basic realm="upstreamtest"`},
			"X-Squid-Error":      {"ERR_CACHE_ACCESS_DENIED 0"},
		})
		return
	}
	switch m.Fault {
	case Reply:
		writeStatus(c, m.Code, m.Reason, m.Header)
		return
	case HangConnect:
		drain(c)
		return
	}
	if req.Method != http.MethodConnect {
		s.forward(c, req, m)
		return
	}
	target, err := s.dialTarget(req.Host)
	if err != nil {
		errno := 111
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			errno = 110
		} else if !errors.Is(err, syscall.ECONNREFUSED) {
			errno = 113
		}
		writeStatus(c, http.StatusServiceUnavailable, "", http.Header{"X-Squid-Error": {fmt.Sprintf("ERR_CONNECT_FAIL %d", errno)}})
		return
	}
	s.tunnels.Add(1)
	if _, err := c.Write(append([]byte("HTTP/1.1 200 Connection established\r\n\r\n"), m.Preamble...)); err != nil {
		target.Close()
		return
	}
	s.relay(c, br, target, m)
}

func (s *Server) authorized(req *http.Request) bool {
	if s.opts.Username == "" {
		return true
	}
	v, ok := strings.CutPrefix(req.Header.Get("Proxy-Authorization"), "Basic ")
	if !ok {
		return false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
	if err != nil {
		return false
	}
	user, pass, _ := strings.Cut(string(raw), ":")
	return user == s.opts.Username && pass == s.opts.Password
}

// forward relays one absolute-URI request to its target and the response
// back (with the data-phase faults), then closes.
func (s *Server) forward(c net.Conn, req *http.Request, m *Mode) {
	host := req.URL.Host
	if req.URL.Port() == "" {
		host = net.JoinHostPort(req.URL.Hostname(), "80")
	}
	target, err := s.dialTarget(host)
	if err != nil {
		writeStatus(c, http.StatusServiceUnavailable, "", http.Header{"X-Squid-Error": {"ERR_CONNECT_FAIL 111"}})
		return
	}
	defer s.untrack(target)
	defer target.Close()
	req.RequestURI = ""
	req.Header.Del("Proxy-Authorization")
	req.Header.Del("Proxy-Connection")
	req.Close = true
	if err := req.Write(target); err != nil {
		return
	}
	s.forwards.Add(1)
	s.copyDown(c, target, m, s.done)
}

// writeStatus writes a complete bodiless response.
func writeStatus(c net.Conn, code int, reason string, h http.Header) {
	if reason == "" {
		reason = http.StatusText(code)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", code, reason)
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("Connection: close\r\nContent-Length: 0\r\n\r\n")
	_, _ = c.Write([]byte(b.String()))
}
