package upstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"time"

	"golang.org/x/net/proxy"

	"github.com/rotor-proxy/rotor/health"
)

// Default timeouts applied when the DialConfig field is zero.
const (
	DefaultConnectTimeout   = 5 * time.Second
	DefaultHandshakeTimeout = 10 * time.Second
)

// ErrInvalidTarget is wrapped (in a Failure of class target_unreachable,
// stage target_connect) when the address passed to DialContext cannot be
// sent to any upstream: no port, a port out of range, or a host name longer
// than SOCKS5 allows (255 bytes, RFC 1928 §5). It is the target's problem,
// never the upstream's, so it must not cool anything.
var ErrInvalidTarget = errors.New("invalid target address")

// aLongTimeAgo is a deadline in the past: setting it unblocks pending I/O at
// once (the trick of x/net internal/socks and net/http).
var aLongTimeAgo = time.Unix(1, 0)

// NewDialer returns the dialer for upstream u: "socks5" and "socks5h" (same
// meaning: target host names are always sent unresolved to the proxy),
// "http", "https" (TLS to the proxy, SNI = proxy host) and "direct" (no
// host: dial the target itself).
//
// Zero cfg fields take the defaults documented on DialConfig. The returned
// dialer's DialContext ctx governs only establishing the connection (TCP
// connect plus proxy handshake), never the returned conn's lifetime; every
// handshake is also bounded by cfg.HandshakeTimeout even when ctx has no
// deadline. Every error DialContext returns is a *health.Failure with the
// class and stage from the table in README/classify.go.
func NewDialer(u *url.URL, cfg DialConfig) (proxy.ContextDialer, error) {
	if u == nil {
		return nil, errors.New("upstream: nil URL")
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	switch u.Scheme {
	case "direct":
		if u.Host != "" || u.User != nil {
			return nil, fmt.Errorf("upstream %s: direct takes no host or credentials", u.Redacted())
		}
		return &directDialer{cfg: cfg}, nil
	case "socks5", "socks5h", "http", "https":
	default:
		return nil, fmt.Errorf("upstream %s: unsupported scheme %q (want socks5, http, https or direct)", u.Redacted(), u.Scheme)
	}
	if err := checkProxyHostPort(u); err != nil {
		return nil, fmt.Errorf("upstream %s: %w", u.Redacted(), err)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream %s: unexpected path, query or fragment", u.Redacted())
	}
	if cfg.SOCKS5Pipeline && u.Scheme != "socks5" && u.Scheme != "socks5h" {
		return nil, fmt.Errorf("upstream %s: pipeline applies to socks5 upstreams only", u.Redacted())
	}
	pd := proxyDialer{addr: u.Host, host: u.Hostname(), cfg: cfg}
	if _, err := netip.ParseAddr(pd.host); err != nil {
		port, _ := strconv.ParseUint(u.Port(), 10, 16) // checked by checkProxyHostPort
		pd.names, pd.port = newHostCache(pd.host), uint16(port)
	}
	if u.User != nil {
		pd.user = u.User.Username()
		pd.pass, _ = u.User.Password()
		pd.hasAuth = true
	}
	switch u.Scheme {
	case "socks5", "socks5h":
		// RFC 1929 §2: ULEN and PLEN are one byte each.
		if len(pd.user) > 255 || len(pd.pass) > 255 {
			return nil, fmt.Errorf("upstream %s: socks5 username and password must be at most 255 bytes", u.Redacted())
		}
		if pd.hasAuth && pd.user == "" {
			return nil, fmt.Errorf("upstream %s: socks5 username must not be empty", u.Redacted())
		}
		return &socks5Dialer{proxyDialer: pd}, nil
	case "https":
		tc := cfg.TLS.Clone()
		if tc == nil {
			tc = new(tls.Config)
		}
		if tc.ServerName == "" {
			tc.ServerName = pd.host
		}
		// CONNECT is spoken in HTTP/1.1: never let ALPN pick h2.
		tc.NextProtos = []string{"http/1.1"}
		return &connectDialer{proxyDialer: pd, tls: tc}, nil
	default:
		return &connectDialer{proxyDialer: pd}, nil
	}
}

func checkProxyHostPort(u *url.URL) error {
	host, port := u.Hostname(), u.Port()
	if host == "" {
		return errors.New("missing proxy host")
	}
	if port == "" {
		return errors.New("missing proxy port")
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("invalid proxy port %q", port)
	}
	return nil
}

// proxyDialer is the part shared by the SOCKS5 and CONNECT dialers: where the
// proxy is, its credentials and the timeouts.
type proxyDialer struct {
	addr    string // proxy host:port
	host    string // proxy host, for SNI
	user    string
	pass    string
	hasAuth bool
	cfg     DialConfig
	// names resolves and keeps the proxy's addresses when host is a name
	// (dial_host.go); nil for an IP literal.
	names *hostCache
	port  uint16
}

// dialProxy makes the TCP connection to the proxy. Its errors are classified
// with stage dial: refused, timeout, or upstream_error.
func (p *proxyDialer) dialProxy(ctx context.Context, target string) (net.Conn, error) {
	d := net.Dialer{Timeout: p.cfg.ConnectTimeout, KeepAlive: p.cfg.KeepAlive}
	var c net.Conn
	var err error
	if p.names != nil {
		c, err = dialHost(ctx, d, p.names, p.port, p.cfg.ConnectTimeout)
	} else {
		c, err = d.DialContext(ctx, "tcp", p.addr)
	}
	if err != nil {
		return nil, failAt(err, health.StageDial, target)
	}
	return c, nil
}

// splitTarget validates the address given to DialContext and returns its
// host (for Failure.Target) and port.
func splitTarget(network, addr string) (host string, port uint16, err error) {
	switch network {
	case "tcp", "tcp4", "tcp6":
	default:
		return "", 0, &health.Failure{Class: health.TargetUnreachable, Stage: health.StageTargetConnect,
			Err: fmt.Errorf("%w: network %q is not supported", ErrInvalidTarget, network)}
	}
	h, ps, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, &health.Failure{Class: health.TargetUnreachable, Stage: health.StageTargetConnect,
			Err: fmt.Errorf("%w: %q: missing port", ErrInvalidTarget, addr)}
	}
	n, perr := strconv.ParseUint(ps, 10, 16)
	if perr != nil || h == "" || len(h) > 255 {
		return h, 0, &health.Failure{Class: health.TargetUnreachable, Stage: health.StageTargetConnect, Target: h,
			Err: fmt.Errorf("%w: %q", ErrInvalidTarget, addr)}
	}
	return h, uint16(n), nil
}

// handshake runs fn, which speaks a proxy protocol over c, bounded by the
// hard ceiling d and by ctx (RFC-agnostic pattern of x/net internal/socks
// connect): the earlier of the two deadlines is set on c, a ctx
// cancellation sets a past deadline from an AfterFunc, and the AfterFunc is
// waited for before handshake returns, so no goroutine outlives it. The
// deadline is cleared afterwards. When ctx was cancelled, the returned
// error wraps ctx.Err() so IsCanceled reports it.
func handshake(ctx context.Context, c net.Conn, d time.Duration, fn func() error) error {
	dl := time.Now().Add(d)
	if cd, ok := ctx.Deadline(); ok && cd.Before(dl) {
		dl = cd
	}
	if err := c.SetDeadline(dl); err != nil {
		return err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = c.SetDeadline(aLongTimeAgo)
		close(fired)
	})
	err := fn()
	if !stop() {
		<-fired
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil && errors.Is(cerr, context.Canceled) {
			return fmt.Errorf("%w: %w", cerr, err)
		}
		return err
	}
	if ctx.Err() != nil {
		// Cancelled right as fn finished: the past deadline may be set; a
		// caller who gave up gets no conn.
		return fmt.Errorf("%w: handshake finished after cancellation", ctx.Err())
	}
	return c.SetDeadline(time.Time{})
}

// failAt classifies err at stage and fills the target, unless err already
// carries a Failure.
func failAt(err error, stage health.Stage, target string) *health.Failure {
	f := Classify(err, stage)
	if f != nil && f.Target == "" {
		f.Target = target
	}
	return f
}
