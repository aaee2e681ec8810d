package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"golang.org/x/net/proxy"

	"github.com/rotor-proxy/rotor/health"
)

// ErrDestinationForbidden is wrapped when the direct dialer refuses a
// destination by policy: after resolution the address is loopback, private
// (RFC 1918, RFC 4193), link-local (incl. the 169.254.169.254 cloud metadata
// service), CGNAT shared space, multicast or unspecified, and
// DialConfig.AllowPrivate is off. It is a Failure of no class (ClassNone)
// at stage target_connect, and the client's fault (ClientFault): the
// client asked for a destination rotor refuses, so no upstream is blamed
// or tried, and the client is told it is forbidden.
var ErrDestinationForbidden = errors.New("destination forbidden by policy")

// directDialer dials targets itself (direct:// upstream). It is the only
// place rotor resolves target names.
type directDialer struct {
	cfg DialConfig
	// resolver looks target names up (nil: net.DefaultResolver). Tests
	// set one whose Dial records and refuses, to see a lookup without
	// sending it.
	resolver *net.Resolver
}

var _ proxy.ContextDialer = (*directDialer)(nil)
var _ proxy.Dialer = (*directDialer)(nil)

// Dial is DialContext with context.Background, for the proxy.Dialer shape.
func (d *directDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// DialContext connects to addr, resolving names. ctx governs only the
// connect. The destination policy is checked in the dialer's Control hook,
// on the address actually being connected to, so a name that resolves to
// a forbidden address cannot slip through between check and use.
//
// A localhost name (localhostName: "localhost" or a name under it, any
// case, with or without the root dot) is never looked up: it is loopback
// (RFC 6761 section 6.3), 127.0.0.1 then ::1, which the policy then
// judges like any loopback address (refused before any connect while
// private destinations are not allowed). Go's resolver finds only the
// exact "localhost" of /etc/hosts and asks DNS for "LOCALHOST." or
// "a.localhost", which sent them to the machine's DNS server.
//
// Classification (there is no proxy: the target is always the one to blame,
// except for local resource errors):
//
//	forbidden destination (ErrDestinationForbidden) none/target_connect: the client's
//	ECONNREFUSED, EHOSTUNREACH, ENETUNREACH,
//	DNS failure                                    target_unreachable/target_connect
//	timeout                                        target_timeout/target_connect
//	client cancellation                            none/target_connect
//	EMFILE, ENFILE, EADDRNOTAVAIL, ENOBUFS, ENOMEM none (ErrLocalResource): rotor's own
//	anything else                                  upstream_error/target_connect
func (d *directDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := splitTarget(network, addr)
	if err != nil {
		return nil, err
	}
	nd := net.Dialer{Timeout: d.cfg.ConnectTimeout, KeepAlive: d.cfg.KeepAlive, Resolver: d.resolver}
	if !d.cfg.AllowPrivate || d.cfg.Forbid != nil {
		nd.ControlContext = func(_ context.Context, _, address string, _ syscall.RawConn) error {
			return checkDestination(address, !d.cfg.AllowPrivate, d.cfg.Forbid)
		}
	}
	var c net.Conn
	if localhostName(host) {
		budget := d.cfg.ConnectTimeout
		if budget <= 0 {
			budget = DefaultConnectTimeout
		}
		c, err = dialAddrs(ctx, nd, loopbackAddrs(network), port, budget)
	} else {
		c, err = nd.DialContext(ctx, network, addr)
	}
	if err != nil {
		if health.LocalResource(err) {
			return nil, &noClassError{LocalFailure(err, health.StageTargetConnect)}
		}
		f := &health.Failure{Class: directClass(err), Stage: health.StageTargetConnect, Target: host, Err: err}
		if f.Class == health.ClassNone {
			return nil, &noClassError{f}
		}
		return nil, f
	}
	return c, nil
}

// noClassError is how the direct dialer returns a Failure of no class
// (health.ClassNone: a forbidden destination, a cancelled dial, rotor's
// own machine short of a resource): its text is the stage and the cause,
// without the "none" of Failure.Error, which is no class clients or
// operators know (README's tables say "—" there); the probe's detail read
// "target_connect: none: dial tcp …". errors.As finds the Failure as ever.
type noClassError struct{ f *health.Failure }

func (e *noClassError) Error() string { return e.f.Stage.String() + ": " + e.f.Err.Error() }

// Unwrap returns the Failure.
func (e *noClassError) Unwrap() error { return e.f }

// localhostName reports whether host is a name RFC 6761 section 6.3
// reserves for loopback: "localhost" or a name ending in ".localhost",
// compared case-insensitively, a root dot ignored (the gateway's check
// for its own listeners reads names the same way).
func localhostName(host string) bool {
	host = strings.TrimSuffix(host, ".")
	const name = "localhost"
	if len(host) < len(name) || !strings.EqualFold(host[len(host)-len(name):], name) {
		return false
	}
	return len(host) == len(name) || host[len(host)-len(name)-1] == '.'
}

// loopbackAddrs are the addresses of a localhost name for network: IPv4
// first, as most services on loopback listen there (and /etc/hosts often
// gives "localhost" nothing else).
func loopbackAddrs(network string) []netip.Addr {
	v4, v6 := netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()
	switch network {
	case "tcp4":
		return []netip.Addr{v4}
	case "tcp6":
		return []netip.Addr{v6}
	}
	return []netip.Addr{v4, v6}
}

func directClass(err error) health.Class {
	var dnsErr *net.DNSError
	switch {
	case IsCanceled(err), errors.Is(err, ErrDestinationForbidden):
		return health.ClassNone
	case errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return health.TargetUnreachable
	case errors.As(err, &dnsErr) && !dnsErr.IsTimeout:
		return health.TargetUnreachable
	case isTimeout(err):
		return health.TargetTimeout
	}
	return health.UpstreamError
}

// checkDestination enforces the direct dialer's policy on a resolved
// "ip:port": public addresses only when publicOnly, and forbid's verdict.
func checkDestination(address string, publicOnly bool, forbid func(netip.AddrPort) error) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: unparsable address %q", ErrDestinationForbidden, address)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if ip := ap.Addr(); publicOnly && forbiddenAddr(ip) {
		return fmt.Errorf("%w: %s is not a public address", ErrDestinationForbidden, ip)
	}
	if forbid != nil {
		if err := forbid(ap); err != nil {
			// forbid's reason stays in the chain: the gateway tells its
			// own listeners from private addresses with errors.Is.
			return fmt.Errorf("%w: %s: %w", ErrDestinationForbidden, ap, err)
		}
	}
	return nil
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// ForbiddenDestination reports whether the direct upstream refuses ip
// while private destinations are not allowed (loopback, private,
// link-local, multicast, unspecified, CGNAT).
func ForbiddenDestination(ip netip.Addr) bool { return forbiddenAddr(ip) }

func forbiddenAddr(ip netip.Addr) bool {
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() ||
		ip.IsUnspecified() || cgnat.Contains(ip) || !ip.IsValid()
}
