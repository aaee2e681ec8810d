package gateway

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// checkExposure refuses configurations that would make rotor an open proxy
// or an unauthenticated admin API on the network.
func checkExposure(cfg *Config) error {
	if len(cfg.Clients) == 0 && !cfg.Listen.AllowOpen {
		for _, a := range []string{cfg.Listen.SOCKS5, cfg.Listen.HTTP} {
			if a != "" && !isLoopback(a) {
				return errors.New("refusing to start an open proxy: " + a + " is not a loopback address and no [[client]] is configured (add [[client]] credentials, or set listen.allow_open = true)")
			}
		}
	}
	if cfg.Listen.Admin != "" && !isLoopback(cfg.Listen.Admin) && cfg.Listen.AdminToken == "" {
		return errors.New("refusing to start: listen.admin " + cfg.Listen.Admin + " is not a loopback address and no admin_token (or admin_token_env) is set")
	}
	return nil
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
// dot ignored, empty host meaning this machine, ports with leading zeros.
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
