// Package upstream owns endpoint records (name, parsed URL, redacted form),
// the per-scheme dialers (socks5, http/https CONNECT, direct), selection
// strategies and the attempt loop that leases an endpoint for one client
// connection. It reports every outcome to health and does not decide health
// itself.
package upstream

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// DialConfig holds the per-dial timeouts shared by every dialer.
type DialConfig struct {
	// ConnectTimeout bounds the TCP connect to the upstream proxy (or to the
	// target for direct). Default 5s.
	ConnectTimeout time.Duration `toml:"connect_timeout"`
	// HandshakeTimeout bounds the proxy handshake (TLS to an https proxy,
	// SOCKS5 greeting/auth/request or HTTP CONNECT) after the TCP connect.
	// Default 10s. Once the proxy has proved alive on the connection (it
	// answered the SOCKS5 greeting and authentication, or completed TLS),
	// the wait for its answer to CONNECT, which is the time it takes to
	// reach the target, gets a budget of its own of the same length: a
	// slow greeting does not eat into the target's time, and a deadline
	// hit there blames the target (target_timeout), not the proxy.
	HandshakeTimeout time.Duration `toml:"handshake_timeout"`
	// TLS is the client TLS config for https:// proxies (nil: system roots).
	TLS *tls.Config `toml:"-"`
	// AllowPrivate lets the direct dialer reach loopback, private and
	// link-local destinations.
	AllowPrivate bool `toml:"-"`
	// KeepAlive is net.Dialer's: 0 turns TCP keep-alive on at connect (Go's
	// 15s), negative leaves it off for the caller to turn on once the
	// connection proves long-lived (the gateway's tunnel watchdog does, so
	// a short tunnel spends no setsockopt calls on it).
	KeepAlive time.Duration `toml:"-"`
	// SOCKS5Pipeline is Spec.Pipeline for one socks5 upstream; NewDialer
	// refuses it for other schemes.
	SOCKS5Pipeline bool `toml:"-"`
	// Forbid (optional) is asked by the direct dialer about the address a
	// target resolved to, right before connecting, whatever AllowPrivate
	// says: the gateway refuses its own listeners there, which a check of
	// the name alone misses (an /etc/hosts alias, DNS pointing at 127.0.0.1).
	// A non-nil error refuses the destination (ErrDestinationForbidden).
	Forbid func(netip.AddrPort) error `toml:"-"`
	// Scrub (optional) hides, in text a peer sent (a proxy's status line,
	// a TLS error, a probe answer), every secret rotor holds: each
	// upstream's password, the clients' passwords, the admin token,
	// whatever their length. The dialer applies it, after its own
	// password and Basic token, before such text goes into an error
	// (ScrubPeer). nil: only the dialer's own credentials are hidden.
	Scrub func(string) string `toml:"-"`
}

// checkTargetHost refuses a target host that cannot be put into a proxy
// request as is: empty or longer than 255 bytes (SOCKS5 ATYP 3 carries
// one length byte, RFC 1928 §5), or anything but an IP literal without a
// zone or a URI reg-name of ASCII letters, digits and "-._~!$&'()*+,;="
// (RFC 3986 §3.2.2, without percent-encoding). CR, LF, SP, NUL and the
// other controls would otherwise go verbatim into the CONNECT request
// line and Host header rotor writes (header injection) or into a SOCKS5
// domain name. The fronts validate first; this is the second line of
// defence, and its errors wrap ErrInvalidTarget: the client's fault,
// never reported to health.
func checkTargetHost(host string) error {
	if len(host) == 0 || len(host) > 255 {
		return fmt.Errorf("%w: host name of %d bytes", ErrInvalidTarget, len(host))
	}
	if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() == "" {
		return nil
	}
	for i := 0; i < len(host); i++ {
		if !regNameByte[host[i]] {
			return fmt.Errorf("%w: host %s: byte %#02x at %d", ErrInvalidTarget, strconv.QuoteToASCII(host), host[i], i)
		}
	}
	return nil
}

// regNameByte marks the bytes checkTargetHost accepts in a host name.
var regNameByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range "-._~!$&'()*+,;=" {
		t[c] = true
	}
	return t
}()

// checkTarget validates a "host:port" target for any upstream: the host
// as checkTargetHost, the port a decimal in 1-65535. It returns the host
// and port, or an error wrapping ErrInvalidTarget.
func checkTarget(addr string) (host string, port uint16, err error) {
	h, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s: want host:port", ErrInvalidTarget, strconv.QuoteToASCII(addr))
	}
	n, perr := strconv.ParseUint(ps, 10, 16)
	if perr != nil || n == 0 {
		return h, 0, fmt.Errorf("%w: %s: port must be 1-65535", ErrInvalidTarget, strconv.QuoteToASCII(addr))
	}
	if err := checkTargetHost(h); err != nil {
		return h, 0, err
	}
	return h, uint16(n), nil
}

// replyPhase gives the wait for the proxy's answer to CONNECT its own
// budget d (see DialConfig.HandshakeTimeout), bounded by ctx's deadline.
// handshake's cancellation watcher sets a past deadline when ctx ends; it
// is checked after the new deadline is set, so a cancellation is never
// overwritten: either it is seen here, or the watcher runs after.
func replyPhase(ctx context.Context, c net.Conn, d time.Duration) error {
	dl := time.Now().Add(d)
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	if err := c.SetDeadline(dl); err != nil {
		return err
	}
	return ctx.Err()
}
