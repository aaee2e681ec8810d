package upstreamtest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strconv"
	"syscall"
	"testing"
)

// NewSOCKS5 starts a fake SOCKS5 proxy (RFC 1928, RFC 1929 auth when
// opts.Username is set; CONNECT only). Like dante, a no-auth fake answers
// 05 FF to a client offering only method 02, and an auth fake answers
// 05 FF to a client not offering 02.
func NewSOCKS5(t testing.TB, opts Options) *Server {
	t.Helper()
	return newServer(t, "socks5", opts, handleSOCKS5, nil)
}

var defaultSOCKSGarbage = []byte("HTTP/1.0 400 Bad Request\r\n\r\nnot socks\n")

func handleSOCKS5(s *Server, c net.Conn, m *Mode) {
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
			g = defaultSOCKSGarbage
		}
		_, _ = c.Write(g)
		drain(c)
		return
	}
	// Greeting: VER NMETHODS METHODS (RFC 1928 §3).
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[0] != 5 {
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, methods); err != nil {
		return
	}
	offers := func(x byte) bool { return bytes.IndexByte(methods, x) >= 0 }
	method := byte(0xFF)
	switch {
	case m.Fault == NoAcceptableMethod:
	case s.opts.Username != "" || m.Fault == RejectAuth:
		if offers(2) {
			method = 2
		}
	case offers(0):
		method = 0
	}
	if _, err := c.Write([]byte{5, method}); err != nil || method == 0xFF {
		if method == 0xFF {
			s.authFails.Add(1)
		}
		return
	}
	if method == 2 {
		user, pass, err := readRFC1929(c)
		if err != nil {
			return
		}
		if m.Fault == RejectAuth || user != s.opts.Username || pass != s.opts.Password {
			s.authFails.Add(1)
			_, _ = c.Write([]byte{1, 1})
			return
		}
		if _, err := c.Write([]byte{1, 0}); err != nil {
			return
		}
	}
	// Request: VER CMD RSV ATYP DST.ADDR DST.PORT (RFC 1928 §4).
	addr, cmd, err := readSOCKSRequest(c)
	if err != nil {
		return
	}
	if cmd != 1 {
		_, _ = c.Write(socksReply(7, nil))
		return
	}
	switch m.Fault {
	case Reply:
		_, _ = c.Write(socksReply(byte(m.Code), nil))
		return
	case HangConnect:
		drain(c)
		return
	}
	target, err := s.dialTarget(addr)
	if err != nil {
		_, _ = c.Write(socksReply(socksCode(err), nil))
		return
	}
	reply := socksReply(0, target.LocalAddr())
	s.tunnels.Add(1)
	if _, err := c.Write(append(reply, m.Preamble...)); err != nil {
		target.Close()
		return
	}
	s.relay(c, c, target, m)
}

func readRFC1929(r io.Reader) (user, pass string, err error) {
	var b [2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", "", err
	}
	if b[0] != 1 {
		return "", "", errors.New("bad auth version")
	}
	u := make([]byte, b[1])
	if _, err := io.ReadFull(r, u); err != nil {
		return "", "", err
	}
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return "", "", err
	}
	p := make([]byte, b[0])
	if _, err := io.ReadFull(r, p); err != nil {
		return "", "", err
	}
	return string(u), string(p), nil
}

func readSOCKSRequest(r io.Reader) (addr string, cmd byte, err error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return "", 0, err
	}
	if b[0] != 5 {
		return "", 0, errors.New("bad version")
	}
	var host string
	switch b[3] {
	case 1, 4:
		ip := make([]byte, map[byte]int{1: 4, 4: 16}[b[3]])
		if _, err := io.ReadFull(r, ip); err != nil {
			return "", 0, err
		}
		host = net.IP(ip).String()
	case 3:
		if _, err := io.ReadFull(r, b[:1]); err != nil {
			return "", 0, err
		}
		name := make([]byte, b[0])
		if _, err := io.ReadFull(r, name); err != nil {
			return "", 0, err
		}
		host = string(name)
	default:
		return "", 0, errors.New("bad atyp")
	}
	var port [2]byte
	if _, err := io.ReadFull(r, port[:]); err != nil {
		return "", 0, err
	}
	return net.JoinHostPort(host, strconv.Itoa(int(binary.BigEndian.Uint16(port[:])))), b[1], nil
}

// socksReply renders a reply with BND.ADDR from bound (0.0.0.0:0 when nil,
// like microsocks).
func socksReply(code byte, bound net.Addr) []byte {
	b := []byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0}
	if ta, ok := bound.(*net.TCPAddr); ok {
		if ip4 := ta.IP.To4(); ip4 != nil {
			copy(b[4:8], ip4)
			binary.BigEndian.PutUint16(b[8:], uint16(ta.Port))
		}
	}
	return b
}

// socksCode maps a target dial error to the reply dante would send.
func socksCode(err error) byte {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return 5
	case errors.As(err, &ne) && ne.Timeout():
		return 6
	case errors.Is(err, syscall.ENETUNREACH):
		return 3
	default:
		return 4
	}
}
