package upstream

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync/atomic"

	"golang.org/x/net/proxy"

	"github.com/rotor-proxy/rotor/health"
)

// Spec is one configured upstream, as the gateway's config hands it over.
type Spec struct {
	URL      *url.URL
	Name     string   // display name; default host:port (user@host:port when ambiguous)
	Disabled bool     // start disabled (operator)
	Tags     []string // selection tags
	Weight   int      // for the weighted strategy; default 1
	MaxConns int      // concurrent tunnels; 0 = unlimited
	Rate     float64  // new tunnels per second; 0 = unlimited
}

// Identity returns the key that identifies an upstream across reloads and
// restarts: scheme, host, port and username. Two entries that differ only
// in username (session-in-username providers) are different upstreams.
func Identity(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	if scheme == "socks5h" {
		scheme = "socks5"
	}
	if scheme == "direct" {
		return "direct://"
	}
	user := ""
	if u.User != nil {
		user = u.User.Username() + "@"
	}
	return scheme + "://" + user + strings.ToLower(u.Host)
}

// Redact returns u as it may leave the process: the password replaced.
func Redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			c := *u
			c.User = url.UserPassword(u.User.Username(), "xxxxx")
			return c.String()
		}
	}
	return u.String()
}

// Endpoint is one upstream in the pool: its identity, dialer and health
// record. Endpoints are immutable after creation except for counters.
type Endpoint struct {
	Name     string
	Key      string
	URL      *url.URL
	Tags     []string
	Weight   int
	MaxConns int
	Rate     float64

	dialer proxy.ContextDialer
	rec    *health.Record
	limit  *rateLimiter

	active atomic.Int64 // open tunnels leased from this endpoint
}

// Active returns the number of open tunnels through e.
func (e *Endpoint) Active() int64 { return e.active.Load() }

// Record returns e's health record.
func (e *Endpoint) Record() *health.Record { return e.rec }

// Scheme returns the lower-case scheme (socks5, http, https, direct).
func (e *Endpoint) Scheme() string {
	s := strings.ToLower(e.URL.Scheme)
	if s == "socks5h" {
		return "socks5"
	}
	return s
}

// Redacted returns the endpoint URL with its password replaced.
func (e *Endpoint) Redacted() string { return Redact(e.URL) }

// HasTags reports whether e carries every tag in want.
func (e *Endpoint) HasTags(want []string) bool {
	for _, w := range want {
		found := false
		for _, t := range e.Tags {
			if t == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// defaultName is host:port, or user@host:port when the user matters.
func defaultName(u *url.URL, withUser bool) string {
	if strings.EqualFold(u.Scheme, "direct") {
		return "direct"
	}
	if withUser && u.User != nil {
		return u.User.Username() + "@" + u.Host
	}
	return u.Host
}

// ValidateURL checks an upstream URL without dialing. Errors never contain
// the password.
func ValidateURL(u *url.URL) error {
	switch strings.ToLower(u.Scheme) {
	case "direct":
		return nil
	case "socks5", "socks5h", "http", "https":
	case "":
		return fmt.Errorf("upstream %q: missing scheme (socks5, http, https or direct)", Redact(u))
	default:
		return fmt.Errorf("upstream %q: unsupported scheme %q (socks5, http, https or direct)", Redact(u), u.Scheme)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return fmt.Errorf("upstream %q: want host:port", Redact(u))
	}
	return nil
}
