package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	socks5 "github.com/armon/go-socks5"
)

// userPassAuth is RFC 1929 username/password authentication, given to
// go-socks5 through its Authenticator hook. Unlike go-socks5's own it
// answers a sub-negotiation whose version is not 1 with a failure status
// (VER 1, STATUS 0xFF) before closing, instead of closing silently. ok is
// set once the credentials passed.
type userPassAuth struct {
	valid func(user, pass string) bool
	ok    *bool
}

func (a userPassAuth) GetCode() uint8 { return socks5.UserPassAuth }

func (a userPassAuth) Authenticate(r io.Reader, w io.Writer) (*socks5.AuthContext, error) {
	if _, err := w.Write([]byte{5, socks5.UserPassAuth}); err != nil {
		return nil, err
	}
	// RFC 1929 section 2: VER ULEN UNAME PLEN PASSWD.
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if hdr[0] != 1 {
		_, _ = w.Write([]byte{1, 0xFF})
		return nil, fmt.Errorf("username/password sub-negotiation version %d, want 1", hdr[0])
	}
	user := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, user); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(r, hdr[:1]); err != nil {
		return nil, err
	}
	pass := make([]byte, hdr[0])
	if _, err := io.ReadFull(r, pass); err != nil {
		return nil, err
	}
	if !a.valid(string(user), string(pass)) {
		_, _ = w.Write([]byte{1, 1}) // RFC 1929: any status but 0 is a failure
		return nil, socks5.UserAuthFailed
	}
	if _, err := w.Write([]byte{1, 0}); err != nil {
		return nil, err
	}
	*a.ok = true
	return &socks5.AuthContext{Method: socks5.UserPassAuth, Payload: map[string]string{"Username": string(user)}}, nil
}

// noAuth is the "no authentication required" method (RFC 1928 section 3);
// ok is set once it was chosen.
type noAuth struct{ ok *bool }

func (a noAuth) GetCode() uint8 { return socks5.NoAuth }

func (a noAuth) Authenticate(_ io.Reader, w io.Writer) (*socks5.AuthContext, error) {
	if _, err := w.Write([]byte{5, socks5.NoAuth}); err != nil {
		return nil, err
	}
	*a.ok = true
	return &socks5.AuthContext{Method: socks5.NoAuth}, nil
}

// errNotSOCKS5 is the handshake error of a client that spoke another
// protocol on the SOCKS5 port.
var errNotSOCKS5 = errors.New("not a SOCKS5 greeting")

// socks5PortHTTPAnswer tells an HTTP client that it reached the SOCKS5
// port.
const socks5PortHTTPAnswer = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nX-Rotor-Error: bad_request\r\n" +
	"Connection: close\r\nContent-Length: 62\r\n\r\nthis is rotor's SOCKS5 port: send HTTP to its HTTP proxy port\n"

// answerNotSOCKS5 answers a client whose first bytes b are not a SOCKS5
// greeting, when it can tell what the client speaks: a SOCKS4 request
// gets the SOCKS4 rejection (VN 0, CD 91 "request rejected or failed"),
// an HTTP request a 400 naming the port. Then it closes c without a
// reset: a FIN, and what the client still sends is read and dropped for
// a moment (within linger), so the answer is not lost to an RST.
func answerNotSOCKS5(c net.Conn, b []byte, linger time.Duration) {
	var answer []byte
	switch {
	case b[0] == 4:
		answer = []byte{0, 0x5B, 0, 0, 0, 0, 0, 0}
	case isUpperASCII(b[0]) && isUpperASCII(b[1]): // GET, POST, CONNECT...
		answer = []byte(socks5PortHTTPAnswer)
	default:
		_ = c.Close()
		return
	}
	_ = c.SetDeadline(time.Now().Add(linger))
	_, _ = c.Write(answer)
	if cw, ok := c.(closeWriter); ok {
		_ = cw.CloseWrite()
		_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
	_ = c.Close()
}

func isUpperASCII(b byte) bool { return 'A' <= b && b <= 'Z' }

// socksRequestStart returns the offset of the SOCKS5 request in b, the
// client's bytes from its greeting on (with the RFC 1929 sub-negotiation
// when userPass), or -1 when b is shorter.
func socksRequestStart(b []byte, userPass bool) int {
	if len(b) < 2 {
		return -1
	}
	n := 2 + int(b[1])
	if userPass {
		if len(b) < n+2 {
			return -1
		}
		ulen := int(b[n+1])
		if len(b) < n+2+ulen+1 {
			return -1
		}
		n += 3 + ulen + int(b[n+2+ulen])
	}
	if n >= len(b) {
		return -1
	}
	return n
}
