// Package upstream owns endpoint records (name, parsed URL, redacted form),
// the per-scheme dialers (socks5, http/https CONNECT, direct), selection
// strategies and the attempt loop that leases an endpoint for one client
// connection. It reports every outcome to health and does not decide health
// itself.
package upstream

import (
	"crypto/tls"
	"time"
)

// DialConfig holds the per-dial timeouts shared by every dialer.
type DialConfig struct {
	// ConnectTimeout bounds the TCP connect to the upstream proxy (or to the
	// target for direct). Default 5s.
	ConnectTimeout time.Duration `toml:"connect_timeout"`
	// HandshakeTimeout bounds the proxy handshake (TLS to an https proxy,
	// SOCKS5 greeting/auth/request or HTTP CONNECT) after the TCP connect.
	// Default 10s.
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
}
