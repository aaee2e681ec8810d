package gateway

// The [listen] checks of config validation: whatever Start refuses for a
// listen address, -check and a reload refuse first, at the key's line.

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// listenErrors reports every [listen] address Start would refuse, at the
// line of its key, so that -check and a reload fail where a start would:
// not host:port, a port net.Listen does not know, two fronts on one
// address, and what checkExposure refuses (an open proxy, an admin API
// beyond loopback without a token). checkExposure is the one rule for
// both; it is asked about each front alone so the error names its key.
func (c *Config) listenErrors() ConfigErrors {
	var errs ConfigErrors
	add := func(key, format string, a ...any) {
		errs = append(errs, ConfigError{File: c.path, Line: c.lines.key(toml.Key{"listen", key}), Msg: fmt.Sprintf(format, a...)})
	}
	fronts := []struct{ key, addr string }{{"socks5", c.Listen.SOCKS5}, {"http", c.Listen.HTTP}, {"admin", c.Listen.Admin}}
	var bound []listenAddr
	envSaid := false // the admin address's error names an unset admin_token_env
	for _, f := range fronts {
		if f.addr == "" {
			continue
		}
		host, port, err := net.SplitHostPort(f.addr)
		if err != nil {
			add(f.key, "listen.%s: %q is not host:port", f.key, shown(f.addr))
			continue
		}
		n, err := listenPort(port)
		if err != nil {
			add(f.key, "listen.%s: %v", f.key, err)
			continue
		}
		a := listenAddr{key: f.key, host: listenHost(host), port: n}
		for _, o := range bound {
			if a.conflicts(o) {
				add(f.key, "listen.%s: %s is already listen.%s's address", f.key, shown(f.addr), o.key)
			}
		}
		bound = append(bound, a)
		alone := &Config{Clients: c.Clients, Listen: ListenConfig{AllowOpen: c.Listen.AllowOpen, AdminToken: c.Listen.AdminToken}}
		switch f.key {
		case "socks5":
			alone.Listen.SOCKS5 = f.addr
		case "http":
			alone.Listen.HTTP = f.addr
		case "admin":
			alone.Listen.Admin = f.addr
		}
		if err := checkExposure(alone); err != nil {
			if f.key == "admin" && c.Listen.AdminToken == "" && c.Listen.AdminTokenEnv != "" {
				add(f.key, "%v (admin_token_env names %s, which is empty or unset)", err, shown(c.Listen.AdminTokenEnv))
				envSaid = true
			} else {
				add(f.key, "%v", err)
			}
		}
	}
	// An unset or empty admin_token_env is an error wherever the admin API
	// listens, as password_env is: on loopback it silently ran with no
	// token, which the operator who named a variable did not mean.
	if !envSaid && c.Listen.AdminToken == "" && c.Listen.AdminTokenEnv != "" {
		add("admin_token_env", "listen.admin_token_env: environment variable %s is empty or unset", shown(c.Listen.AdminTokenEnv))
	}
	return errs
}

// listenPort is the port net.Listen would bind for port: a number up to
// 65535 (0 or "" picks a free one) or a service name from /etc/services.
func listenPort(port string) (int, error) {
	if port == "" {
		return 0, nil
	}
	if strings.Trim(port, "0123456789") == "" {
		if n, err := strconv.Atoi(port); err == nil && n <= 65535 {
			return n, nil
		}
		return 0, fmt.Errorf("port %s is out of range (0-65535)", shown(port))
	}
	n, err := net.LookupPort("tcp", port)
	if err != nil {
		return 0, fmt.Errorf("unknown port %q (want a number, 0-65535)", shown(port))
	}
	return n, nil
}

// listenAddr is one front's bind address, for the same-address check.
type listenAddr struct {
	key, host string
	port      int
}

// listenHost normalises a bind host: lower case, "localhost" as the
// 127.0.0.1 net.Listen picks for it, an IP in its canonical form.
func listenHost(h string) string {
	h = strings.ToLower(h)
	if h == "localhost" {
		return "127.0.0.1"
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.String()
	}
	return h
}

// conflicts reports whether a and b cannot both be bound: the same port
// (0 picks a free one each time) on the same host, or a wildcard covering
// the other. "" and "::" listen on IPv4 too (dual stack); 0.0.0.0 covers
// IPv4 and names, not IPv6 addresses.
func (a listenAddr) conflicts(b listenAddr) bool {
	if a.port == 0 || a.port != b.port {
		return false
	}
	if a.host == b.host || a.host == "" || a.host == "::" || b.host == "" || b.host == "::" {
		return true
	}
	isV6 := func(h string) bool { ip := net.ParseIP(h); return ip != nil && ip.To4() == nil }
	return (a.host == "0.0.0.0" && !isV6(b.host)) || (b.host == "0.0.0.0" && !isV6(a.host))
}
