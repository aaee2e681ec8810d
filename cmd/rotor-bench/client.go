package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// tunnelDialer opens a tunnel to a target through one path: the gateway's
// SOCKS5 front, its HTTP CONNECT front, or the relay directly (baseline).
// ctx bounds establishment only, never the tunnel's lifetime.
type tunnelDialer interface {
	DialTunnel(ctx context.Context, target *net.TCPAddr) (net.Conn, error)
}

// socks5Dialer is a minimal RFC 1928 client: no authentication, CONNECT to
// an IPv4 literal. It waits for the method reply before sending the request
// (no pipelining), like common clients do, on both measured paths alike.
type socks5Dialer struct{ proxy string }

// DialTunnel implements tunnelDialer.
func (s socks5Dialer) DialTunnel(ctx context.Context, target *net.TCPAddr) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", s.proxy)
	if err != nil {
		return nil, err
	}
	if err := socks5ClientHandshake(ctx, c, target); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// socks5ClientHandshake runs the greeting and the CONNECT request on c.
func socks5ClientHandshake(ctx context.Context, c net.Conn, target *net.TCPAddr) error {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	ip4 := target.IP.To4()
	if ip4 == nil {
		return errors.New("socks5: target must be IPv4")
	}
	if _, err := c.Write([]byte{5, 1, 0}); err != nil {
		return fmt.Errorf("socks5 greeting: %w", err)
	}
	var b [32]byte
	if _, err := io.ReadFull(c, b[:2]); err != nil {
		return fmt.Errorf("socks5 method reply: %w", err)
	}
	if b[0] != 5 || b[1] != 0 {
		return fmt.Errorf("socks5 method reply %d %d", b[0], b[1])
	}
	req := []byte{5, 1, 0, 1, ip4[0], ip4[1], ip4[2], ip4[3], byte(target.Port >> 8), byte(target.Port)}
	if _, err := c.Write(req); err != nil {
		return fmt.Errorf("socks5 request: %w", err)
	}
	if _, err := io.ReadFull(c, b[:4]); err != nil {
		return fmt.Errorf("socks5 reply: %w", err)
	}
	if b[1] != 0 {
		return fmt.Errorf("socks5 reply code %d", b[1])
	}
	var rest int
	switch b[3] {
	case 1:
		rest = 4 + 2
	case 4:
		rest = 16 + 2
	case 3:
		if _, err := io.ReadFull(c, b[:1]); err != nil {
			return fmt.Errorf("socks5 reply: %w", err)
		}
		rest = int(b[0]) + 2
	default:
		return fmt.Errorf("socks5 reply address type %d", b[3])
	}
	if _, err := io.CopyN(io.Discard, c, int64(rest)); err != nil {
		return fmt.Errorf("socks5 reply: %w", err)
	}
	return c.SetDeadline(time.Time{})
}

// connectDialer is a minimal RFC 9110 CONNECT client.
type connectDialer struct{ proxy string }

// maxConnectResponse bounds the CONNECT response head.
const maxConnectResponse = 16 << 10

// DialTunnel implements tunnelDialer. Bytes read past the response head are
// returned first by the conn (a prefixConn); usually there are none and the
// raw *net.TCPConn is returned.
func (h connectDialer) DialTunnel(ctx context.Context, target *net.TCPAddr) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", h.proxy)
	if err != nil {
		return nil, err
	}
	rest, err := connectHandshake(ctx, c, target.String())
	if err != nil {
		c.Close()
		return nil, err
	}
	if len(rest) > 0 {
		return &prefixConn{Conn: c, pre: rest}, nil
	}
	return c, nil
}

func connectHandshake(ctx context.Context, c net.Conn, hostport string) ([]byte, error) {
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req := "CONNECT " + hostport + " HTTP/1.1\r\nHost: " + hostport + "\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return nil, fmt.Errorf("connect request: %w", err)
	}
	buf := make([]byte, 0, 1024)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxConnectResponse {
				return nil, errors.New("connect response head too large")
			}
			buf = append(buf, make([]byte, len(buf))...)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if end := bytes.Index(buf, []byte("\r\n\r\n")); end >= 0 {
			if err := checkConnectStatus(buf[:end]); err != nil {
				return nil, err
			}
			return buf[end+4:], c.SetDeadline(time.Time{})
		}
		if err != nil {
			return nil, fmt.Errorf("connect response: %w", err)
		}
	}
}

// checkConnectStatus accepts any 2xx status line (RFC 9110 section 9.3.6).
func checkConnectStatus(head []byte) error {
	line, _, _ := bytes.Cut(head, []byte("\r\n"))
	f := bytes.Fields(line)
	if len(f) < 2 || !bytes.HasPrefix(f[0], []byte("HTTP/1.")) {
		return fmt.Errorf("connect: malformed status line %q", line)
	}
	code, err := strconv.Atoi(string(f[1]))
	if err != nil || code < 200 || code > 299 {
		return fmt.Errorf("connect: status %q", line)
	}
	return nil
}

// prefixConn returns pre before reading from Conn.
type prefixConn struct {
	net.Conn
	pre []byte
}

func (p *prefixConn) Read(b []byte) (int, error) {
	if len(p.pre) > 0 {
		n := copy(b, p.pre)
		p.pre = p.pre[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// echoOnce writes payload and reads the same number of bytes back,
// checking them: it is how a tunnel is proven usable.
func echoOnce(c net.Conn, payload, scratch []byte, deadline time.Time) error {
	c.SetDeadline(deadline)
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(payload); err != nil {
		return fmt.Errorf("echo write: %w", err)
	}
	if _, err := io.ReadFull(c, scratch[:len(payload)]); err != nil {
		return fmt.Errorf("echo read: %w", err)
	}
	if !bytes.Equal(scratch[:len(payload)], payload) {
		return errors.New("echo mismatch")
	}
	return nil
}
