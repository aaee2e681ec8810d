package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"

	"golang.org/x/net/proxy"

	"github.com/rotor-proxy/rotor/health"
)

// rotor speaks the client side of SOCKS5 (RFC 1928) and username/password
// authentication (RFC 1929) itself instead of using x/net/proxy, because
// x/net reports reply codes and auth failures only as strings and exact
// classification matters more than reuse (STYLE rule 23).

// SOCKS5 protocol constants (RFC 1928 §3-§6, RFC 1929 §2).
const (
	socks5Version     = 0x05
	socks5AuthNone    = 0x00
	socks5AuthUser    = 0x02
	socks5AuthNoMatch = 0xFF
	socks5CmdConnect  = 0x01
	socks5AtypIPv4    = 0x01
	socks5AtypDomain  = 0x03
	socks5AtypIPv6    = 0x04
	rfc1929Version    = 0x01
)

// ErrNoAcceptableMethod is wrapped when the proxy answers the method
// negotiation with 0xFF: it requires credentials rotor does not have (or
// rejects the ones rotor would offer). Class auth_rejected, stage proxy_auth.
var ErrNoAcceptableMethod = errors.New("socks5: no acceptable authentication method")

// ErrMalformedReply is wrapped when a proxy's answer violates its protocol
// (SOCKS5 or HTTP): garbage, a wrong version, an unknown address type, or
// the conn closing mid-answer. Class upstream_error, stage proxy_handshake.
var ErrMalformedReply = errors.New("malformed proxy reply")

// AuthStatusError is a non-zero RFC 1929 status: the proxy rejected the
// username/password. Class auth_rejected, stage proxy_auth.
type AuthStatusError struct{ Status byte }

func (e *AuthStatusError) Error() string {
	return fmt.Sprintf("socks5: username/password rejected (status %d)", e.Status)
}

// ReplyError is a SOCKS5 CONNECT reply with REP != 0. The SOCKS front relays
// Code to its client when Class() is a target failure. Find it with
// errors.As.
type ReplyError struct{ Code byte }

var replyText = [...]string{
	1: "general SOCKS server failure",
	2: "connection not allowed by ruleset",
	3: "network unreachable",
	4: "host unreachable",
	5: "connection refused",
	6: "TTL expired",
	7: "command not supported",
	8: "address type not supported",
}

func (e *ReplyError) Error() string {
	if int(e.Code) < len(replyText) && replyText[e.Code] != "" {
		return fmt.Sprintf("socks5 reply %d: %s", e.Code, replyText[e.Code])
	}
	return fmt.Sprintf("socks5 reply %d: unknown code", e.Code)
}

type socks5Dialer struct{ proxyDialer }

var _ proxy.ContextDialer = (*socks5Dialer)(nil)
var _ proxy.Dialer = (*socks5Dialer)(nil)

// Dial is DialContext with context.Background, for the proxy.Dialer shape.
func (d *socks5Dialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// DialContext connects to addr through the SOCKS5 proxy. The host part of
// addr is sent unresolved (ATYP 3) unless it is an IP literal. ctx governs
// only the establishment. The conn returned is the raw *net.TCPConn: the
// handshake reads exactly the bytes of each reply, never more.
//
// A host that cannot be sent (see checkTargetHost) is refused before the
// proxy is dialed, with an error wrapping ErrInvalidTarget. A deadline hit
// while waiting for the CONNECT reply, after the proxy answered the
// greeting and authentication on this connection, is the target's
// (target_timeout at target_connect): the proxy is alive and still trying
// to reach it (dante answers REP 6 only after ~31 s, microsocks never).
func (d *socks5Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := splitTarget(network, addr)
	if err != nil {
		return nil, err
	}
	req, err := socks5ConnectRequest(host, port)
	if err != nil {
		return nil, &health.Failure{Class: health.TargetUnreachable, Stage: health.StageTargetConnect, Target: host, Err: err}
	}
	c, err := d.dialProxy(ctx, host)
	if err != nil {
		return nil, err
	}
	err = handshake(ctx, c, d.cfg.HandshakeTimeout, func() error { return d.negotiate(ctx, c, req) })
	if err != nil {
		c.Close()
		// Typed errors (auth, reply codes, the wait for the target) carry
		// their own stage; everything else, deadlines included, happened
		// during the proxy handshake.
		return nil, failAt(err, health.StageProxyHandshake, host)
	}
	return c, nil
}

// negotiate runs method selection, optional RFC 1929 auth and CONNECT.
func (d *socks5Dialer) negotiate(ctx context.Context, c net.Conn, req []byte) error {
	if d.cfg.SOCKS5Pipeline {
		return d.negotiatePipelined(ctx, c, req)
	}
	// Offer {00, 02} with credentials: dante in no-auth mode answers FF to a
	// client offering only 02 (UPSTREAM-SIGNALS.md).
	greet := []byte{socks5Version, 1, socks5AuthNone}
	if d.hasAuth {
		greet = []byte{socks5Version, 2, socks5AuthNone, socks5AuthUser}
	}
	if _, err := c.Write(greet); err != nil {
		return err
	}
	method, err := readMethodReply(c)
	if err != nil {
		return err
	}
	switch {
	case method == socks5AuthNone:
	case method == socks5AuthUser && d.hasAuth:
		if err := d.authenticate(c); err != nil {
			return err
		}
	case method == socks5AuthNoMatch:
		return ErrNoAcceptableMethod
	default:
		return fmt.Errorf("%w: socks5 proxy selected method %#x that was not offered", ErrMalformedReply, method)
	}
	// The proxy answered: it is alive. What follows is its attempt to
	// reach the target, with a budget of its own.
	if err := replyPhase(ctx, c, d.cfg.HandshakeTimeout); err != nil {
		return err
	}
	if _, err := c.Write(req); err != nil {
		return err
	}
	if _, err := readConnectReply(c); err != nil {
		return awaitingTarget(err, true)
	}
	return nil
}

// negotiatePipelined sends the greeting, the RFC 1929 credentials and the
// CONNECT request in one write, then reads the three answers in order. It
// offers the one method it goes on to speak: username/password with
// credentials, else none. A server that reads more than each step needs
// and drops the rest never answers the CONNECT: the deadline then ends
// the handshake as a timeout, with a detail that names the likely cause.
func (d *socks5Dialer) negotiatePipelined(ctx context.Context, c net.Conn, req []byte) error {
	method := byte(socks5AuthNone)
	if d.hasAuth {
		method = socks5AuthUser
	}
	b := make([]byte, 0, 3+3+len(d.user)+len(d.pass)+len(req))
	b = append(b, socks5Version, 1, method)
	if d.hasAuth {
		b = d.appendAuth(b)
	}
	b = append(b, req...)
	if _, err := c.Write(b); err != nil {
		return err
	}
	got, err := readMethodReply(c)
	switch {
	case err != nil:
		return err
	case got == socks5AuthNoMatch:
		return ErrNoAcceptableMethod
	case got != method:
		return fmt.Errorf("%w: socks5 proxy selected method %#x that was not offered", ErrMalformedReply, got)
	}
	if d.hasAuth {
		if err := readAuthReply(c); err != nil {
			return pipelineHint(err)
		}
	}
	// The server may have dropped the request that followed what it
	// answered (see pipelineHint): its answers so far do not prove it
	// serves pipelined requests, so a deadline here is the target's only
	// when the attempt loop knows the upstream served lately
	// (Attempts.Failed).
	if err := replyPhase(ctx, c, d.cfg.HandshakeTimeout); err != nil {
		return err
	}
	if _, err := readConnectReply(c); err != nil {
		return awaitingTarget(pipelineHint(err), false)
	}
	return nil
}

// pipelineHint adds the likely cause to a deadline hit after the method
// reply of a pipelined handshake: the server dropped what followed it.
func pipelineHint(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (no answer after the method selection: the proxy may not accept pipeline = true)", err)
	}
	return err
}

// authenticate runs the RFC 1929 sub-negotiation. The password never
// appears in any error.
func (d *socks5Dialer) authenticate(c net.Conn) error {
	if _, err := c.Write(d.appendAuth(make([]byte, 0, 3+len(d.user)+len(d.pass)))); err != nil {
		return err
	}
	return readAuthReply(c)
}

// appendAuth appends the RFC 1929 username/password request to b.
func (d *socks5Dialer) appendAuth(b []byte) []byte {
	b = append(b, rfc1929Version, byte(len(d.user)))
	b = append(b, d.user...)
	b = append(b, byte(len(d.pass)))
	return append(b, d.pass...)
}

// readMethodReply reads the method selection message (RFC 1928 §3).
func readMethodReply(r io.Reader) (byte, error) {
	var b [2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, shortRead(err, "socks5 method selection")
	}
	if b[0] != socks5Version {
		return 0, fmt.Errorf("%w: socks5 method selection version %#x", ErrMalformedReply, b[0])
	}
	return b[1], nil
}

// readAuthReply reads the RFC 1929 status. Any non-zero status is a
// rejection. The version byte is not checked: some servers answer 05 00
// instead of 01 00, and the status is what matters.
func readAuthReply(r io.Reader) error {
	var b [2]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return shortRead(err, "socks5 auth status")
	}
	if b[1] != 0 {
		return &AuthStatusError{Status: b[1]}
	}
	return nil
}

// readConnectReply reads a CONNECT reply (RFC 1928 §6) exactly, byte for
// byte, so no tunnel data is consumed. REP != 0 returns *ReplyError without
// reading the rest. It returns the bound address on success.
func readConnectReply(r io.Reader) (netip.AddrPort, error) {
	var b [4 + 16 + 2]byte // VER REP RSV ATYP + the largest fixed address + port
	if _, err := io.ReadFull(r, b[:4]); err != nil {
		return netip.AddrPort{}, shortRead(err, "socks5 connect reply")
	}
	if b[0] != socks5Version {
		return netip.AddrPort{}, fmt.Errorf("%w: socks5 reply version %#x", ErrMalformedReply, b[0])
	}
	if b[1] != 0 {
		return netip.AddrPort{}, &ReplyError{Code: b[1]}
	}
	var n int
	switch b[3] {
	case socks5AtypIPv4:
		n = 4
	case socks5AtypIPv6:
		n = 16
	case socks5AtypDomain:
		if _, err := io.ReadFull(r, b[:1]); err != nil {
			return netip.AddrPort{}, shortRead(err, "socks5 connect reply")
		}
		var name [255 + 2]byte
		if _, err := io.ReadFull(r, name[:int(b[0])+2]); err != nil {
			return netip.AddrPort{}, shortRead(err, "socks5 connect reply")
		}
		return netip.AddrPort{}, nil
	default:
		return netip.AddrPort{}, fmt.Errorf("%w: socks5 reply address type %#x", ErrMalformedReply, b[3])
	}
	if _, err := io.ReadFull(r, b[:n+2]); err != nil {
		return netip.AddrPort{}, shortRead(err, "socks5 connect reply")
	}
	ip, _ := netip.AddrFromSlice(b[:n])
	return netip.AddrPortFrom(ip, uint16(b[n])<<8|uint16(b[n+1])), nil
}

// socks5ConnectRequest builds the CONNECT request (RFC 1928 §4). Names go
// as ATYP 3 unresolved (socks5h semantics for both schemes); a name
// checkTargetHost refuses (over 255 bytes, controls, spaces) returns an
// error wrapping ErrInvalidTarget.
func socks5ConnectRequest(host string, port uint16) ([]byte, error) {
	b := make([]byte, 0, 6+1+len(host))
	b = append(b, socks5Version, socks5CmdConnect, 0)
	if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() == "" {
		if ip.Is4() || ip.Is4In6() {
			a := ip.Unmap().As4()
			b = append(b, socks5AtypIPv4)
			b = append(b, a[:]...)
		} else {
			a := ip.As16()
			b = append(b, socks5AtypIPv6)
			b = append(b, a[:]...)
		}
	} else {
		if err := checkTargetHost(host); err != nil {
			return nil, err
		}
		b = append(b, socks5AtypDomain, byte(len(host)))
		b = append(b, host...)
	}
	return append(b, byte(port>>8), byte(port)), nil
}

// shortRead turns an EOF in the middle of a protocol message into
// ErrMalformedReply; deadline and other I/O errors pass through so they
// classify as timeout etc.
func shortRead(err error, what string) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s: proxy closed the connection", ErrMalformedReply, what)
	}
	return fmt.Errorf("%s: %w", what, err)
}
