package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	splicecopy "github.com/rotor-proxy/rotor/internal/splice"
)

// relay is "the upstream relay": the SOCKS5 server the gateway under test is
// configured to use, and the server the baseline client talks to directly.
// It is deliberately what a competent minimal Go upstream looks like: RFC 1928
// CONNECT with no authentication (RFC 1929 username/password is accepted with
// any credentials, because a gateway may forward scraper usernames), then a
// splice(2) between the two *net.TCPConn (see copyFuncs for the two ways it
// can copy). It only dials loopback targets.
type relay struct {
	socks *tcpServer
	http  *tcpServer // optional plain HTTP proxy, see relay_http.go
}

// relayHandshakeTimeout bounds the SOCKS5 greeting, auth and request.
const relayHandshakeTimeout = 10 * time.Second

// startRelay starts the SOCKS5 relay on socksAddr and, when httpAddr is not
// empty, the HTTP proxy used for relay-as-gateway plumbing runs.
func startRelay(socksAddr, httpAddr string, cp copyFunc) (*relay, error) {
	r := &relay{}
	var err error
	if r.socks, err = listenTCP(socksAddr, func(c *net.TCPConn) { serveSOCKS5(c, cp) }); err != nil {
		return nil, err
	}
	if httpAddr != "" {
		if r.http, err = listenTCP(httpAddr, func(c *net.TCPConn) { serveHTTPProxy(c, cp) }); err != nil {
			r.socks.Close()
			return nil, err
		}
	}
	return r, nil
}

// startHop starts a pure TCP hop: every connection accepted on socksAddr
// (and on httpAddr, when set) is spliced to socksTo (httpTo), byte for
// byte. Standing in as the gateway (-gateway-is-hop) it measures what one
// more zero-copy relay hop in the path costs on this machine, the floor
// under any gateway's figures; the client's SOCKS5 or CONNECT handshake
// passes through it to the relay.
func startHop(socksAddr, socksTo, httpAddr, httpTo string, cp copyFunc) (*relay, error) {
	forward := func(to string) func(*net.TCPConn) {
		return func(c *net.TCPConn) {
			ap, err := netip.ParseAddrPort(to)
			if err != nil {
				return
			}
			t, err := dialLoopback(ap)
			if err != nil {
				return
			}
			defer t.Close()
			splice(c, t, cp)
		}
	}
	r := &relay{}
	var err error
	if r.socks, err = listenTCP(socksAddr, forward(socksTo)); err != nil {
		return nil, err
	}
	if httpAddr != "" && httpTo != "" {
		if r.http, err = listenTCP(httpAddr, forward(httpTo)); err != nil {
			r.socks.Close()
			return nil, err
		}
	}
	return r, nil
}

// Close stops both listeners and waits for every tunnel to end.
func (r *relay) Close() {
	r.socks.Close()
	if r.http != nil {
		r.http.Close()
	}
}

// SOCKS5 reply codes used by the relay (RFC 1928 section 6).
const (
	repSucceeded      = 0x00
	repGeneralFailure = 0x01
	repNotAllowed     = 0x02
	repHostUnreach    = 0x04
	repConnRefused    = 0x05
	repCmdUnsupported = 0x07
	repAddrUnsupport  = 0x08
)

// serveSOCKS5 handles one client connection: handshake, dial, splice.
func serveSOCKS5(c *net.TCPConn, cp copyFunc) {
	c.SetDeadline(time.Now().Add(relayHandshakeTimeout))
	target, ok := socks5ServerHandshake(c)
	if !ok {
		return
	}
	t, err := dialLoopback(target)
	if err != nil {
		code := byte(repHostUnreach)
		if errors.Is(err, syscall.ECONNREFUSED) {
			code = repConnRefused
		} else if errors.Is(err, errNotLoopback) {
			code = repNotAllowed
		}
		writeSOCKS5Reply(c, code, nil)
		return
	}
	defer t.Close()
	if writeSOCKS5Reply(c, repSucceeded, t.LocalAddr().(*net.TCPAddr)) != nil {
		return
	}
	c.SetDeadline(time.Time{})
	splice(c, t, cp)
}

// socks5ServerHandshake reads the greeting, optional RFC 1929 auth and the
// request, and returns the CONNECT target. Reads are exact (io.ReadFull on
// the raw conn), so no client byte is ever buffered away from the splice.
func socks5ServerHandshake(c *net.TCPConn) (netip.AddrPort, bool) {
	var b [256]byte
	if _, err := io.ReadFull(c, b[:2]); err != nil || b[0] != 5 {
		return netip.AddrPort{}, false
	}
	methods := b[:b[1]]
	if _, err := io.ReadFull(c, methods); err != nil {
		return netip.AddrPort{}, false
	}
	method := byte(0xff)
	for _, m := range methods {
		if m == 0x00 {
			method = 0x00
			break
		}
		if m == 0x02 {
			method = 0x02
		}
	}
	if _, err := c.Write([]byte{5, method}); err != nil || method == 0xff {
		return netip.AddrPort{}, false
	}
	if method == 0x02 && !skipUserPass(c, b[:]) {
		return netip.AddrPort{}, false
	}
	if _, err := io.ReadFull(c, b[:4]); err != nil || b[0] != 5 {
		return netip.AddrPort{}, false
	}
	if b[1] != 1 {
		writeSOCKS5Reply(c, repCmdUnsupported, nil)
		return netip.AddrPort{}, false
	}
	var ip netip.Addr
	switch b[3] {
	case 1:
		if _, err := io.ReadFull(c, b[:4]); err != nil {
			return netip.AddrPort{}, false
		}
		ip = netip.AddrFrom4([4]byte(b[:4]))
	case 4:
		if _, err := io.ReadFull(c, b[:16]); err != nil {
			return netip.AddrPort{}, false
		}
		ip = netip.AddrFrom16([16]byte(b[:16]))
	case 3:
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			return netip.AddrPort{}, false
		}
		name := b[1 : 1+int(b[0])]
		if _, err := io.ReadFull(c, name); err != nil {
			return netip.AddrPort{}, false
		}
		// Only literal addresses and "localhost": the bench never resolves names.
		var err error
		if ip, err = netip.ParseAddr(string(name)); err != nil {
			if string(name) != "localhost" {
				writeSOCKS5Reply(c, repNotAllowed, nil)
				return netip.AddrPort{}, false
			}
			ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	default:
		writeSOCKS5Reply(c, repAddrUnsupport, nil)
		return netip.AddrPort{}, false
	}
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip.Unmap(), binary.BigEndian.Uint16(b[:2])), true
}

// skipUserPass reads an RFC 1929 sub-negotiation and accepts any
// credentials: VER ULEN UNAME PLEN PASSWD.
func skipUserPass(c *net.TCPConn, b []byte) bool {
	if _, err := io.ReadFull(c, b[:2]); err != nil || b[0] != 1 {
		return false
	}
	ulen := int(b[1])
	if _, err := io.ReadFull(c, b[:ulen+1]); err != nil { // UNAME + PLEN
		return false
	}
	if _, err := io.ReadFull(c, b[:int(b[ulen])]); err != nil {
		return false
	}
	_, err := c.Write([]byte{1, 0})
	return err == nil
}

// writeSOCKS5Reply writes a reply with an IPv4 bound address (zero if nil).
func writeSOCKS5Reply(c net.Conn, code byte, bound *net.TCPAddr) error {
	rep := []byte{5, code, 0, 1, 0, 0, 0, 0, 0, 0}
	if bound != nil {
		if ip4 := bound.IP.To4(); ip4 != nil {
			copy(rep[4:8], ip4)
		}
		binary.BigEndian.PutUint16(rep[8:], uint16(bound.Port))
	}
	_, err := c.Write(rep)
	return err
}

var errNotLoopback = errors.New("target is not a loopback address")

// dialLoopback dials target, refusing anything outside 127.0.0.0/8 and ::1.
func dialLoopback(target netip.AddrPort) (*net.TCPConn, error) {
	if !target.Addr().IsLoopback() {
		return nil, errNotLoopback
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", net.JoinHostPort(target.Addr().String(), strconv.Itoa(int(target.Port()))))
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// splice copies both directions between a and b until both end. When one
// direction reaches EOF the other side gets a half-close (CloseWrite); when
// it fails, both conns are closed so the other direction cannot hang. The
// helper goroutine is owned by splice, which waits for it.
func splice(a, b *net.TCPConn, cp copyFunc) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(b, a, cp)
	}()
	pipe(a, b, cp)
	<-done
}

// copyFunc copies one direction of a tunnel.
type copyFunc func(dst, src *net.TCPConn) (int64, error)

// copyFuncs are the relay's copy modes (-relay-copy). Both move bytes with
// splice(2): "idle" is internal/splice.Copy (2 fds per idle tunnel, io.Copy once a
// direction carries bulk), "iocopy" is plain io.Copy from the first byte (6
// fds per idle tunnel: it parks a pipe pair per blocked direction).
var copyFuncs = map[string]copyFunc{
	"idle":   splicecopy.Copy,
	"iocopy": func(dst, src *net.TCPConn) (int64, error) { return io.Copy(dst, src) },
}

// pipe copies src to dst with cp.
func pipe(dst, src *net.TCPConn, cp copyFunc) {
	if _, err := cp(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	dst.CloseWrite()
}
