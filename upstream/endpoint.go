package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/proxy"

	"github.com/rotor-proxy/rotor/health"
)

// Spec is one configured upstream, as the gateway's config hands it over.
type Spec struct {
	URL      *url.URL
	Name     string   // display name; default host:port (user@host:port when ambiguous)
	Disabled bool     // start disabled (operator)
	Tags     []string // selection tags
	Weight   int      // for the weighted strategy; default 1, at most 1,000,000
	MaxConns int      // concurrent tunnels; 0 = unlimited
	Rate     float64  // new tunnels per second; 0 = unlimited
	// Pipeline (socks5 only) sends the greeting, RFC 1929 credentials and
	// CONNECT in one write: one round trip per tunnel instead of two (three
	// with credentials). Only for servers that read exactly what each step
	// needs (dante does; microsocks drops the rest and the handshake times out).
	Pipeline bool
}

// MaxNameLen is the longest upstream name, in bytes.
const MaxNameLen = 200

// CheckName reports whether name can name an upstream: it is what the
// admin API takes as one path segment (/api/upstreams/{name}), what
// metrics labels, the X-Rotor-Upstream header and logs carry. So it is
// not empty or only white space, holds no control or other non-printable
// character (a NUL, a newline, U+202E), no '/', is not "." or ".." (which
// a path cannot hold as a segment), and is at most MaxNameLen bytes.
// Printable Unicode, spaces and dots are fine.
func CheckName(name string) error {
	switch {
	case strings.TrimSpace(name) == "":
		return errors.New("must not be empty or only white space")
	case len(name) > MaxNameLen:
		return fmt.Errorf("is %d bytes long; at most %d", len(name), MaxNameLen)
	case !utf8.ValidString(name):
		return errors.New("is not valid UTF-8")
	case strings.Contains(name, "/"):
		return errors.New("must not contain '/' (the admin API takes the name as one path segment)")
	case name == "." || name == "..":
		return errors.New(`must not be "." or ".." (the admin API takes the name as one path segment)`)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("must not contain control or non-printable characters (found %U)", r)
		}
	}
	return nil
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
	if strings.EqualFold(u.Scheme, "direct") && u.Host == "" && u.Opaque == "" {
		return "direct://" // url.URL prints "direct:", which reads like a typo
	}
	if u.Opaque != "" {
		// A seller line mistaken for a URL: "user:pass@host:port" parses
		// as scheme "user" with opaque "pass@host:port", and
		// "host:port:user:pass" as scheme "host"; either may hold a
		// password, so only what follows the last "@" is kept.
		c := *u
		c.Opaque = "xxxxx"
		if i := strings.LastIndex(u.Opaque, "@"); i >= 0 {
			c.Opaque += u.Opaque[i:]
		}
		c.RawQuery, c.Fragment, c.RawFragment = "", "", ""
		return c.String()
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
// record. Endpoints are immutable after creation; their counters live in
// a shared *load so that a reload which rebuilds the Endpoint value keeps
// counting the tunnels opened before it (Lease.Done of an old lease
// releases the same counter the new Endpoint checks for max_conns).
type Endpoint struct {
	Name     string
	Key      string
	URL      *url.URL
	Tags     []string
	Weight   int
	MaxConns int
	Rate     float64

	// ld is shared with the endpoint this one replaced on reload. Loads
	// come from the pool's slab (dense), so ranking a sample of a large
	// pool touches little memory. It sits next to MaxConns: releasing a
	// tunnel reads both, from one cache line.
	ld      *load
	dialer  proxy.ContextDialer
	dialGen uint64       // the pool's dialer generation it was built in
	clock   health.Clock // the pool's, for latency samples
	rec     *health.Record
	limit   *rateLimiter // nil when Rate is 0
	// pipeline is Spec.Pipeline, built into dialer; kept to notice a change.
	pipeline bool
	// credsReplaced is set when a reload replaced e with an endpoint of
	// the same identity and other credentials (a new password): an
	// auth_rejected from a dial still in flight through e says nothing
	// about the new ones (Attempts.Failed).
	credsReplaced atomic.Bool
}

// load is the mutable per-identity state of an endpoint, shared by every
// Endpoint value built for the same identity across reloads.
type load struct {
	// active counts tunnels leased from the endpoint: incremented when a
	// pick reserves it, decremented exactly once by Lease.Done,
	// Attempts.Failed or Pool.Release (or by the pick itself when a later
	// check refuses).
	active atomic.Int64
	// lat is the smoothed dial+handshake latency and the time of its last
	// sample, in one word (see latWord) so that they change together and a
	// load stays 16 bytes, four to a cache line for least-conn. 0 means no
	// sample: none yet, or none since the endpoint was seen out (see
	// lowestLatency), so that an upstream back from cooling is measured
	// afresh.
	lat atomic.Uint64
}

// A latency word holds the smoothed latency in microseconds (at least 1)
// in its high 32 bits and the clock's Unix second of the last sample in
// its low 32 (compared by difference, so its wrap in 2106 is harmless).
// Microseconds are finer than any proxy's set-up time varies, and 32 bits
// of them (71 minutes) exceed any handshake timeout.
type latWord = uint64

func packLat(us uint64, at uint32) latWord { return us<<32 | latWord(at) }

// latUS returns w's latency in microseconds, 0 for no sample.
func latUS(w latWord) uint64 { return w >> 32 }

// latAt returns the second of w's last sample.
func latAt(w latWord) uint32 { return uint32(w) }

// latSecond is t as a latency word's sample time.
func latSecond(t time.Time) uint32 { return uint32(t.Unix()) }

// Active returns the number of open tunnels through e.
func (e *Endpoint) Active() int64 { return e.ld.active.Load() }

// Latency returns e's smoothed dial+handshake latency, 0 when unknown.
func (e *Endpoint) Latency() time.Duration {
	return time.Duration(latUS(e.ld.lat.Load())) * time.Microsecond
}

// Smoothing. A sample is one dial + proxy handshake, and for a SOCKS5 or
// CONNECT tunnel the proxy's answer waits on its connect to the target:
// one slow target (3 s to accept) is one huge sample against a proxy that
// is fast. Unbounded, it moved a 2 ms proxy's average to 750 ms at once,
// and lowest-latency left it for a 150 ms one (issue: 1000 requests went
// slow after one such tunnel). So a sample counts at most latencyClip
// times the current average: one outlier raises it by a quarter at most,
// while a real slow-down still shows within a few tunnels (each adds up
// to 25%). A faster sample is taken as it is: a proxy is never faster
// than it can be.
//
// An average whose last sample is over latencyStale seconds old is
// replaced, not blended: it says little about the upstream now (it
// cooled, was disabled, or simply was not picked), and lowest-latency
// explores such upstreams again (see lowestLatency).
const (
	latencyAlphaShift = 2 // a new sample weighs 1/2^shift: 1/4
	latencyClip       = 2
	latencyStale      = 30 // seconds
	latencyMaxUS      = 1<<31 - 1
)

// observeLatency folds one dial+handshake duration into e's average.
func (e *Endpoint) observeLatency(d time.Duration) {
	now := latSecond(e.clock.Now())
	x := min(max(d.Microseconds(), 1), latencyMaxUS) // 0 is reserved for "unknown"
	for {
		w := e.ld.lat.Load()
		next := x
		if old := int64(latUS(w)); old != 0 && now-latAt(w) <= latencyStale {
			next = max(old+(min(x, old*latencyClip)-old)>>latencyAlphaShift, 1)
		}
		if e.ld.lat.CompareAndSwap(w, packLat(uint64(next), now)) {
			return
		}
	}
}

// reserve counts one more tunnel on ld unless that would exceed maxConns
// (0: unlimited). It is the only increment of an active counter.
func reserve(ld *load, maxConns int64) bool {
	if maxConns <= 0 {
		ld.active.Add(1)
		return true
	}
	for {
		n := ld.active.Load()
		if n >= maxConns {
			return false
		}
		if ld.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

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

// AbsoluteForm reports whether plain-HTTP requests go to e in absolute
// form (GET http://host/path) on a connection from DialForward: http://
// and https:// proxies (stock squid and tinyproxy refuse CONNECT to port
// 80). Others get them through a tunnel from DialContext.
func (e *Endpoint) AbsoluteForm() bool {
	_, ok := e.dialer.(forwardDialer)
	return ok
}

// forwardDialer is the dialer of an http:// or https:// proxy.
type forwardDialer interface {
	DialForward(ctx context.Context) (c net.Conn, proxyAuth string, ok bool, err error)
}

// DialForward opens a connection to e's proxy for plain-HTTP requests in
// absolute form (see AbsoluteForm; TLS to an https:// proxy), through the
// proxy's name cache like every dial of e, and returns the
// Proxy-Authorization value to send with them ("" without credentials).
// ok is false when e takes no absolute form. ctx governs only the connect
// and TLS; a success feeds e's smoothed latency as DialContext's does.
func (e *Endpoint) DialForward(ctx context.Context) (c net.Conn, proxyAuth string, ok bool, err error) {
	fd, isFwd := e.dialer.(forwardDialer)
	if !isFwd {
		return nil, "", false, nil
	}
	t0 := e.clock.Now()
	c, proxyAuth, ok, err = fd.DialForward(ctx)
	if err == nil && ok {
		e.observeLatency(e.clock.Now().Sub(t0))
	}
	return c, proxyAuth, ok, err
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

// ValidateURL checks an upstream URL without dialing, as strictly as a
// list-file line (see CheckURL). Errors never contain the password.
func ValidateURL(u *url.URL) error {
	err := CheckURL(u)
	if err == nil {
		return nil
	}
	shown := Redact(u)
	if strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") {
		// "u:12#x@h:1" parses as host "u:12" and fragment "x@h:1": a
		// password with an unencoded '/', '?' or '#'. Its first part is
		// now the host, so not even that is shown.
		shown = u.Scheme + "://xxxxx"
	} else if u.Opaque == "" {
		c := *u
		c.Path, c.RawPath, c.RawQuery, c.ForceQuery, c.Fragment, c.RawFragment = "", "", "", false, "", ""
		shown = Redact(&c)
	}
	return fmt.Errorf("upstream %q: %w", shown, err)
}

// CheckURL says what is wrong with an upstream URL, without showing it,
// for callers that show the URL as the user wrote it. It wants a known
// scheme; for proxies a host and a port in 1-65535 and nothing after
// host:port but an optional "/"; for direct:// nothing at all; for
// socks5 a username and password RFC 1929 can carry.
func CheckURL(u *url.URL) error {
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "direct", "socks5", "socks5h", "http", "https":
	case "":
		return errors.New("missing scheme (socks5, http, https or direct)")
	default:
		return fmt.Errorf("unsupported scheme %q (socks5, http, https or direct)", u.Scheme)
	}
	if u.Opaque != "" {
		if scheme == "direct" {
			return errors.New("want direct:// (direct takes no host, port or credentials)")
		}
		return fmt.Errorf("want %s://[user:pass@]host:port", scheme)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		if strings.Contains(u.Path+u.RawQuery+u.Fragment, "@") {
			return errors.New("'/', '?' or '#' before the '@': percent-encode them in the password (%2F, %3F, %23)")
		}
		return errors.New("unexpected path, query or fragment after host:port")
	}
	if scheme == "direct" {
		if u.Host != "" || u.User != nil {
			return errors.New("direct:// takes no host, port or credentials (it dials targets itself)")
		}
		return nil
	}
	host, port, err := net.SplitHostPort(u.Host)
	switch {
	case err != nil && u.Port() == "" && !strings.HasSuffix(u.Host, ":"), err == nil && port == "":
		return errors.New("missing port (want host:port)")
	case err != nil:
		return errors.New("want host:port")
	case host == "":
		return errors.New("missing host (want host:port)")
	}
	if n, err := strconv.Atoi(port); err != nil || !isDigits(port) || n < 1 || n > 65535 {
		// Not quoted: when net/url read a password as the port, the
		// caller's redacted URL hides it, and so must this.
		return errors.New("invalid port (want 1-65535)")
	}
	if (scheme == "socks5" || scheme == "socks5h") && u.User != nil {
		// What NewDialer refuses, refused here too, so that -check and a
		// list file's line report it instead of the pool refusing the
		// whole config at start or reload. RFC 1929 §2: ULEN and PLEN are
		// one byte each, and ULEN is at least 1.
		pass, _ := u.User.Password()
		switch {
		case u.User.Username() == "":
			return errors.New("socks5 username must not be empty (RFC 1929)")
		case len(u.User.Username()) > 255 || len(pass) > 255:
			return errors.New("socks5 username and password must be at most 255 bytes (RFC 1929)")
		}
	}
	return nil
}
