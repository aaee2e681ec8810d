package gateway

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rotor-proxy/rotor/upstream"
)

// checkExposure refuses configurations that would make rotor an open proxy
// or an unauthenticated admin API on the network.
func checkExposure(cfg *Config) error { return exposure(cfg, "start", "start") }

// exposure is checkExposure's rule with the words for what is refused:
// starting, or a reload that would expose the running listeners.
func exposure(cfg *Config, proxy, admin string) error {
	if len(cfg.Clients) == 0 && !cfg.Listen.AllowOpen {
		for _, a := range []string{cfg.Listen.SOCKS5, cfg.Listen.HTTP} {
			if a != "" && !isLoopback(a) {
				return errors.New("refusing to " + proxy + " an open proxy: " + a + " is not a loopback address and no [[client]] is configured (add [[client]] credentials, or set listen.allow_open = true)")
			}
		}
	}
	if cfg.Listen.Admin != "" && !isLoopback(cfg.Listen.Admin) && cfg.Listen.AdminToken == "" {
		return errors.New("refusing to " + admin + ": listen.admin " + cfg.Listen.Admin + " is not a loopback address and no admin_token (or admin_token_env) is set")
	}
	return nil
}

// openProxyWarning is logged when rotor starts, or a reload makes it, an
// open proxy the operator asked for (listen.allow_open).
const openProxyWarning = "OPEN PROXY: a front listens beyond loopback with no [[client]] credentials (listen.allow_open = true)"

// openProxy reports whether cfg serves anyone who can reach a front: no
// [[client]] and a front beyond loopback (allow_open let it start).
func openProxy(cfg *Config) bool {
	return len(cfg.Clients) == 0 && !(isLoopback(cfg.Listen.SOCKS5) && isLoopback(cfg.Listen.HTTP))
}

// bound is cfg with the listener addresses of running, the config the
// listeners were bound with: what cfg exposes while they stay open.
func bound(cfg, running *Config) *Config {
	c := *cfg
	c.Listen.SOCKS5, c.Listen.HTTP, c.Listen.Admin = running.Listen.SOCKS5, running.Listen.HTTP, running.Listen.Admin
	return &c
}

// isLoopback reports whether addr (host:port) binds only loopback. An empty
// host or a wildcard binds every interface.
func isLoopback(addr string) bool {
	if addr == "" {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// selfTarget reports whether addr (a client's requested target) is one of
// rotor's own listeners, which clients must not reach through rotor (a
// loop, or a way around the admin API's loopback binding). Hosts are
// compared the way a dialer would read them: case-insensitive, trailing
// dot ignored, empty host meaning this machine, ports with leading zeros,
// and IPv4 shorthand (127.1, 2130706433, 0x7f000001, 017700000001) read
// as inet_aton(3) reads it, since getaddrinfo and proxies like squid
// connect to the address it means.
//
// Every loopback address counts as this machine, whatever address the
// listener is bound to: rotor cannot know which machine an upstream
// proxy's loopback is (a squid beside rotor reaches 127.0.0.2 on a
// wildcard-bound rotor), and 0.0.0.0 is connected to as loopback.
func (s *Server) selfTarget(addr string) bool {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return false
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	ip := net.ParseIP(host)
	if ip == nil && endsInNumber(host) { // no parse (and no allocation) for DNS names
		if a, ok := parseIPv4Shorthand(host); ok {
			ip = net.IP(a.AsSlice())
		}
	}
	local := host == "" || host == "localhost" || strings.HasSuffix(host, ".localhost") ||
		(ip != nil && (ip.IsLoopback() || ip.IsUnspecified()))
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ln := range s.listeners {
		la, ok := ln.Addr().(*net.TCPAddr)
		if !ok || port != la.Port {
			continue
		}
		if local || (ip != nil && ip.Equal(la.IP)) || (ip != nil && la.IP.IsUnspecified() && isLocalIP(ip)) {
			return true
		}
		if ip == nil && s.localNames.local(host) {
			return true // this machine's name (hostname, hosts file) at a listener's port
		}
	}
	return false
}

// forbidSelf is the direct dialer's last check (DialConfig.Forbid), on the
// address a target name resolved to: selfTarget on the name misses a name
// that resolves to this machine (an /etc/hosts alias, a DNS record
// pointing at 127.0.0.1), which would open the admin API, bound to
// loopback without a token, to every client of rotor.
func (s *Server) forbidSelf(ap netip.AddrPort) error {
	if s.selfTarget(ap.String()) {
		return errSelfTarget
	}
	return nil
}

// isLocalIP reports whether ip is assigned to an interface of this machine
// (a listener on 0.0.0.0 is reachable on all of them).
func isLocalIP(ip net.IP) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

var errSelfTarget = errors.New("rotor does not proxy to its own listeners")

// clientRefusal reports whether err refused a client's target before any
// upstream was picked: rotor itself, or no host or port an upstream can
// be asked for, or a destination the direct upstream refuses by policy.
// Such a line is logged at info, not warn: it is the
// client's doing (a hostile client can send any number of them), and
// warnings are written at once, one write each.
func clientRefusal(err error) bool {
	return errors.Is(err, errSelfTarget) || errors.Is(err, errBadTarget) || errors.Is(err, upstream.ErrInvalidTarget) ||
		errors.Is(err, upstream.ErrDestinationForbidden)
}

// parseIPv4Shorthand parses host the way inet_aton(3) does (and with it
// getaddrinfo, and proxies such as squid): one to four parts separated by
// dots, each decimal, octal with a leading 0, or hex with 0x; the last
// part fills the bytes the others left (127.1 is 127.0.0.1, 10.1 is
// 10.0.0.1, 2130706433 is 127.0.0.1). A trailing dot is ignored.
func parseIPv4Shorthand(host string) (netip.Addr, bool) {
	host = strings.TrimSuffix(host, ".")
	parts := strings.Split(host, ".")
	if host == "" || len(parts) > 4 {
		return netip.Addr{}, false
	}
	var v [4]uint64
	for i, p := range parts {
		n, ok := inetAtonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		v[i] = n
	}
	last := len(parts) - 1
	for _, n := range v[:last] {
		if n > 0xff {
			return netip.Addr{}, false
		}
	}
	if v[last] >= 1<<(8*(4-last)) {
		return netip.Addr{}, false
	}
	n := v[last]
	for i := 0; i < last; i++ {
		n |= v[i] << (8 * (3 - i))
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// inetAtonPart parses one part of an inet_aton address: 0x hex (digits
// may be none, as strtoul allows), 0 octal, else decimal. Values past 32
// bits are refused rather than wrapped.
func inetAtonPart(p string) (uint64, bool) {
	base := uint64(10)
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	case p == "":
		return 0, false
	}
	var n uint64
	for i := 0; i < len(p); i++ {
		d := uint64(0xff)
		switch c := p[i]; {
		case '0' <= c && c <= '9':
			d = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			d = uint64(c-'a') + 10
		case 'A' <= c && c <= 'F':
			d = uint64(c-'A') + 10
		}
		if d >= base {
			return 0, false
		}
		if n = n*base + d; n > 0xffffffff {
			return 0, false
		}
	}
	return n, true
}

// endsInNumber reports whether host's last label (a trailing dot
// ignored) is a number as inet_aton reads one: decimal digits, or 0x and
// hex digits. No DNS name ends so (top-level domains are never all
// numeric, RFC 3696 section 2); resolvers and proxies read such a host
// as an IPv4 address, or fail on it, each in its own way.
func endsInNumber(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		for i := 2; i < len(last); i++ {
			if c := last[i] | 0x20; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(last); i++ {
		if last[i] < '0' || last[i] > '9' {
			return false
		}
	}
	return true
}
