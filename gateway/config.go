// Package gateway owns rotor's front listeners (SOCKS5 through
// github.com/armon/go-socks5, HTTP CONNECT and absolute-URI forwarding), the
// client-credential check, the tunnel relay and its drain registry, the
// admin API, reload, and the top-level Config that composes the config
// types of the other packages.
//
// It does not decide health (package health does) nor pick upstreams
// (package upstream does); it reports what it observes on the wire.
package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/BurntSushi/toml"

	"github.com/rotor-proxy/rotor/cluster"
	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// Config is the whole rotor.toml. Decoding is the only place that knows
// the TOML layout; each table is a config type owned by the package that
// uses it.
type Config struct {
	// StateFile, when set, keeps upstream records across restarts. A
	// relative path is taken from the config file's directory (statePath).
	StateFile string `toml:"state_file"`
	// ShutdownGrace is how long open tunnels may finish on SIGTERM. Default
	// 30s; "0s" closes them at once.
	ShutdownGrace time.Duration `toml:"shutdown_grace"`
	// TunnelIdleTimeout closes a tunnel with no traffic either way for this
	// long. Default 0 (never).
	TunnelIdleTimeout time.Duration `toml:"tunnel_idle_timeout"`
	// AllowPrivateDestinations lets the direct upstream reach loopback,
	// private, link-local and metadata addresses. Default false.
	AllowPrivateDestinations bool `toml:"allow_private_destinations"`
	// UpstreamCAFile is a PEM file of CA certificates trusted for https://
	// upstream proxies besides the system's (a squid https_port with a
	// private CA). Read at start.
	UpstreamCAFile string `toml:"upstream_ca_file"`

	Listen          ListenConfig          `toml:"listen"`
	Clients         []ClientConfig        `toml:"client"`
	Pool            upstream.PoolConfig   `toml:"pool"`
	Probe           health.ProbeConfig    `toml:"probe"`
	Cooldown        health.CooldownConfig `toml:"cooldown"`
	SlowBody        SlowBodyConfig        `toml:"slow_body"`
	TargetHTTPError TargetHTTPErrorConfig `toml:"target_http_error"`
	Upstreams       []UpstreamConfig      `toml:"upstream"`
	UpstreamFiles   []UpstreamFileConfig  `toml:"upstream_file"`
	// Cluster is the [cluster] table: fleet mode through Redis (issue
	// 10). Absent: single process, no Redis.
	Cluster cluster.Config `toml:"cluster"`
	Metrics MetricsConfig  `toml:"metrics"`

	// path is the file the config came from ("" for built-in defaults).
	path  string
	lines lineIndex
	elems elemIndex
	// named[i] is whether the i-th [[upstream]] sets name, so that
	// name = "" is an error rather than the default name.
	named []bool
	// bad holds, while parseConfig validates, the lines of values left
	// out for their errors: cross-field checks that read one are skipped.
	bad map[int]bool
}

// ListenConfig is the [listen] table.
type ListenConfig struct {
	SOCKS5 string `toml:"socks5"` // default 127.0.0.1:1080; "" disables
	HTTP   string `toml:"http"`   // default 127.0.0.1:8080; "" disables
	Admin  string `toml:"admin"`  // default 127.0.0.1:9090; "" disables
	// AllowOpen lets a front listen on a non-loopback address with no
	// [[client]] credentials (an open proxy). Default false.
	AllowOpen bool `toml:"allow_open"`
	// AdminToken is the Bearer token the admin API requires when it is not
	// on loopback. AdminTokenEnv names an environment variable holding it.
	AdminToken    string `toml:"admin_token"`
	AdminTokenEnv string `toml:"admin_token_env"`
	// HandshakeTimeout bounds a client's SOCKS5 greeting/auth/request or
	// HTTP request line and headers, and a whole admin API request (body
	// included). Default 10s.
	HandshakeTimeout time.Duration `toml:"handshake_timeout"`
	// MaxConnections caps concurrent client connections per front; 0 = no cap.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerIP caps concurrent connections from one client IP;
	// 0 = no cap.
	MaxConnectionsPerIP int `toml:"max_connections_per_ip"`
}

// MetricsConfig is the [metrics] table.
type MetricsConfig struct {
	// PerUpstreamLimit: /metrics carries the per-upstream series (ten per
	// upstream) while the pool has at most this many upstreams; above it
	// only the pool-wide ones, so a 100,000-line list does not turn every
	// scrape into 1,000,000 series. Default 10,000; 0 = no limit.
	PerUpstreamLimit int `toml:"per_upstream_limit"`
}

// perUpstream reports whether a pool of n upstreams gets per-upstream series.
func (m MetricsConfig) perUpstream(n int) bool {
	return m.PerUpstreamLimit == 0 || n <= m.PerUpstreamLimit
}

// ClientConfig is one [[client]] credential. It never prints its password.
type ClientConfig struct {
	Username    string `toml:"username"`
	Password    string `toml:"password"`
	PasswordEnv string `toml:"password_env"`
}

// String redacts the password.
func (c ClientConfig) String() string { return "client " + c.Username }

// SlowBodyConfig is the [slow_body] table.
type SlowBodyConfig struct {
	// FirstByte: the client sent data and no byte came back this long.
	// Default 10s; "0s" in the file disables (fill makes it negative,
	// which is how the relays read "none").
	FirstByte time.Duration `toml:"first_byte"`
	// Stall: a response that started goes silent this long while the
	// client waits. Default 30s; "0s" in the file disables, as above.
	Stall time.Duration `toml:"stall"`
	// Scope is "upstream" (default) or "target". A tunnel's first-byte
	// silence is the target host's whatever it says, unless the evidence
	// says the upstream's (health's silence rule; firstByteFailure).
	Scope string `toml:"scope"`
}

// TargetHTTPErrorConfig is the [target_http_error] table.
type TargetHTTPErrorConfig struct {
	// Statuses on plain-HTTP responses that count against the upstream.
	// 300-599 (a success is never a ban). Default [403, 429, 503].
	Statuses []int `toml:"statuses"`
	// Scope is "target" (default) or "upstream".
	Scope string `toml:"scope"`
}

// UpstreamConfig is one [[upstream]].
type UpstreamConfig struct {
	URL         string   `toml:"url"`
	Name        string   `toml:"name"`
	Disabled    bool     `toml:"disabled"`
	PasswordEnv string   `toml:"password_env"`
	Tags        []string `toml:"tags"`
	Weight      int      `toml:"weight"`
	MaxConns    int      `toml:"max_conns"`
	Rate        float64  `toml:"rate"`
	// Pipeline: socks5 only; see upstream.Spec.Pipeline.
	Pipeline bool `toml:"pipeline"`
}

// UpstreamFileConfig is one [[upstream_file]].
type UpstreamFileConfig struct {
	Path   string   `toml:"path"`
	Scheme string   `toml:"scheme"` // for lines without one; default http
	Tags   []string `toml:"tags"`
	// Pipeline applies upstream.Spec.Pipeline to every line (socks5 lines
	// only: the file's scheme must be socks5).
	Pipeline bool `toml:"pipeline"`
}

// ConfigError is one problem in a config file, printed FILE:LINE: message.
type ConfigError struct {
	File string
	Line int
	Msg  string
}

// Error is FILE:LINE: message, the message cut to maxMsg bytes.
func (e ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, clip(e.Msg, maxMsg))
	}
	return fmt.Sprintf("%s: %s", e.File, clip(e.Msg, maxMsg))
}

// ConfigErrors is every problem found in one file.
type ConfigErrors []ConfigError

func (es ConfigErrors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// Defaults returns the built-in configuration rotor runs on when no config
// file is found: loopback listeners and one direct upstream.
func Defaults() *Config {
	c := &Config{Upstreams: []UpstreamConfig{{URL: "direct://", Name: "direct"}}}
	// The built-in fronts listen on loopback only, so every client already
	// reaches this machine's private addresses itself: letting the direct
	// upstream reach them too exposes nothing (rotor's own listeners stay
	// refused), and a newcomer's first curl to a local server works.
	c.AllowPrivateDestinations = true
	c.fill(nil)
	return c
}

// upstreamTLS is the client TLS config for https:// upstreams: nil (the
// system's CAs) without upstream_ca_file, else the system's CAs and the
// file's (a path relative to the config file's directory).
func (c *Config) upstreamTLS() (*tls.Config, error) { return c.caTLS(c.UpstreamCAFile) }

// probeTLS is the client TLS config for an https probe URL: nil (the
// system's CAs) without probe.ca_file, else the system's CAs and the file's.
// It is apart from upstream_ca_file: the probe target and the proxies are
// different parties, and trusting the proxies' CA for it would widen what
// a probe's pass proves.
func (c *Config) probeTLS() (*tls.Config, error) { return c.caTLS(c.Probe.CAFile) }

// caTLS trusts the system's CAs and those of the PEM file at path
// (relative to the config file's directory); nil for no path.
func (c *Config) caTLS(path string) (*tls.Config, error) {
	if path == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(c.resolve(path))
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return &tls.Config{RootCAs: pool}, nil
}

// statePath is state_file as rotor opens it: a relative path is taken
// from the config file's directory, like every path in the file (under
// systemd the working directory is /), or "" when unset.
func (c *Config) statePath() string {
	if c.StateFile == "" {
		return ""
	}
	return c.resolve(c.StateFile)
}

// Warnings lists what is valid but will not work as the operator likely
// means; -check prints them and start logs them. (A missing probe.url is
// said by -check and by the prober itself.)
func (c *Config) Warnings() []string {
	var w []string
	if c.Probe.URL != "" && !c.AllowPrivateDestinations && c.hasDirect() {
		if u, err := url.Parse(c.Probe.URL); err == nil && privateHost(u.Hostname()) {
			w = append(w, fmt.Sprintf("probe.url host %s is a loopback or private address, which the direct upstream may not reach "+
				"(allow_private_destinations = false): its probes will fail and it will never serve", u.Hostname()))
		}
	}
	return append(w, c.Cluster.Warnings()...)
}

// hasDirect reports whether an [[upstream]] is direct://.
func (c *Config) hasDirect() bool {
	for _, u := range c.Upstreams {
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(u.URL)), "direct:") {
			return true
		}
	}
	return false
}

// privateHost reports a host the direct dialer refuses without
// allow_private_destinations: localhost, or such an IP literal.
func privateHost(h string) bool {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && upstream.ForbiddenDestination(ip.Unmap())
}

// Path returns the file the config was loaded from ("" for defaults).
func (c *Config) Path() string { return c.path }

// LoadConfig reads and validates path. Every error carries the file and,
// where it can be known, the line.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, ConfigErrors{{File: path, Msg: err.Error()}}
	}
	return ParseConfig(path, data)
}

// ParseConfig decodes and validates data as the file named path. It
// reports every error it finds at once: only a TOML syntax error stops it
// (nothing after it can be read); a value of the wrong type or a bad
// duration is reported and left out, and the rest is still checked.
func ParseConfig(path string, data []byte) (*Config, error) {
	c, errs := parseConfig(path, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return c, nil
}

// parseConfig is ParseConfig, also returning the config when it has
// errors but could be decoded (nil: not TOML, or not decodable), with the
// values that had errors left at their defaults. -check uses it to check
// the list files of a config with errors too.
func parseConfig(path string, data []byte) (*Config, ConfigErrors) {
	text := string(data)
	c := &Config{path: path}
	// Before anything reads the text as TOML: a deeply nested file costs
	// the decoder seconds and gigabytes (config_depth.go).
	if e := c.nestingError(text); e != nil {
		return nil, ConfigErrors{*e}
	}
	c.lines, c.elems = indexLines(text), indexElems(text)
	// The plain tree first: it fails only on syntax, and shows what each
	// key holds, which the typed decode hides (an integer duration) or
	// reports one at a time without a usable line (a type error).
	tree, err := decodeTree(text)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, ConfigErrors{c.parseError(pe, text)}
		}
		return nil, ConfigErrors{{File: path, Msg: redactText(strings.TrimPrefix(err.Error(), "toml: "))}}
	}
	md, errs, ok := c.decode(text, tree)
	if !ok {
		return nil, errs.sorted()
	}
	c.named = elemsSetting(tree, "upstream", reflect.TypeFor[UpstreamConfig](), "Name")
	errs = append(errs, c.explicitErrors(&md, elemsSetting(tree, "upstream", reflect.TypeFor[UpstreamConfig](), "Weight"))...)
	// A value left out for its error is at its default now: what
	// validation says about the same line would be about that default.
	bad := map[int]bool{}
	for _, e := range errs {
		bad[e.Line] = true
	}
	for _, k := range unknownKeys(md.Undecoded()) {
		errs = append(errs, ConfigError{File: path, Line: c.lines.key(k), Msg: fmt.Sprintf("unknown key %q", shown(k.String()))})
	}
	// Before fill, which reads password_env into Password.
	errs = append(errs, c.clientPasswordErrors()...)
	c.fill(&md)
	c.bad = bad
	for _, e := range c.validate() {
		if e.Line == 0 || !bad[e.Line] {
			errs = append(errs, e)
		}
	}
	c.bad = nil
	return c, errs.sorted()
}

// clientPasswordErrors is an error for each [[client]] that sets both
// password and password_env, at password_env, and for a [listen] with both
// admin_token and admin_token_env. Neither can be the one meant
// for sure: password_env is there to keep the secret out of the file, and
// an operator who rotates the variable would find the file's password
// still in force (it was, silently). ([[upstream]] is different: its
// password_env replaces the password of a URL copied as given, documented
// in config.example.toml.)
func (c *Config) clientPasswordErrors() ConfigErrors {
	var errs ConfigErrors
	for i, cl := range c.Clients {
		if cl.Password != "" && cl.PasswordEnv != "" {
			errs = append(errs, ConfigError{File: c.path, Line: c.elemKey("client", i, "password_env"),
				Msg: fmt.Sprintf("client %q: set password or password_env, not both", shown(cl.Username))})
		}
	}
	// The admin token likewise: the file's token won over the variable.
	if c.Listen.AdminToken != "" && c.Listen.AdminTokenEnv != "" {
		errs = append(errs, ConfigError{File: c.path, Line: c.lines.key(toml.Key{"listen", "admin_token_env"}),
			Msg: "listen: set admin_token or admin_token_env, not both"})
	}
	return errs
}

// unknownKeys is keys (md.Undecoded) without those under another of them:
// an unknown table ("[cooldown.refsued]") is one mistake, reported once at
// its header, not again for every key it holds ("cooldown.refsued.base").
func unknownKeys(keys []toml.Key) []toml.Key {
	unknown := make(map[string]bool, len(keys))
	for _, k := range keys {
		unknown[k.String()] = true
	}
	var out []toml.Key
	for _, k := range keys {
		under := false
		for j := 1; j < len(k) && !under; j++ {
			under = unknown[k[:j].String()]
		}
		if !under {
			out = append(out, k)
		}
	}
	return out
}

// sorted orders es by line, stably, with the errors of no line (about the
// whole file) last: -check then reads like the file.
func (es ConfigErrors) sorted() ConfigErrors {
	slices.SortStableFunc(es, func(a, b ConfigError) int {
		switch {
		case a.Line == b.Line:
			return 0
		case a.Line == 0:
			return 1
		case b.Line == 0:
			return -1
		}
		return a.Line - b.Line
	})
	return es
}

// fill applies defaults. md is nil for built-in defaults.
func (c *Config) fill(md *toml.MetaData) {
	defined := func(k ...string) bool { return md != nil && md.IsDefined(k...) }
	if !defined("listen", "socks5") {
		c.Listen.SOCKS5 = "127.0.0.1:1080"
	}
	if !defined("listen", "http") {
		c.Listen.HTTP = "127.0.0.1:8080"
	}
	if !defined("listen", "admin") {
		c.Listen.Admin = "127.0.0.1:9090"
	}
	if c.Listen.HandshakeTimeout == 0 {
		c.Listen.HandshakeTimeout = 10 * time.Second
	}
	if !defined("shutdown_grace") {
		c.ShutdownGrace = 30 * time.Second // "0s": open tunnels are closed at once
	}
	if !defined("metrics", "per_upstream_limit") {
		c.Metrics.PerUpstreamLimit = 10_000
	}
	switch {
	case defined("slow_body", "first_byte") && c.SlowBody.FirstByte == 0:
		c.SlowBody.FirstByte = -1 // "0s": no first-byte check (negative disables)
	case c.SlowBody.FirstByte == 0:
		c.SlowBody.FirstByte = 10 * time.Second
	}
	switch {
	case defined("slow_body", "stall") && c.SlowBody.Stall == 0:
		c.SlowBody.Stall = -1 // "0s": no stall check
	case c.SlowBody.Stall == 0:
		c.SlowBody.Stall = 30 * time.Second
	}
	if c.SlowBody.Scope == "" {
		c.SlowBody.Scope = "upstream"
	}
	if !defined("target_http_error", "statuses") {
		c.TargetHTTPError.Statuses = []int{403, 429, 503}
	}
	if c.TargetHTTPError.Scope == "" {
		c.TargetHTTPError.Scope = "target"
	}
	// Where the packages read a zero value as "use the default", a zero
	// the file sets means none: no jitter, no ramp, no wait.
	if defined("cooldown", "jitter") && c.Cooldown.Jitter == 0 {
		c.Cooldown.Jitter = -1 // health: negative is none
	}
	if defined("pool", "slow_start") && c.Pool.SlowStart == 0 {
		c.Pool.SlowStart = -1 // negative disables the ramp
	}
	if defined("pool", "wait_for_upstream") && c.Pool.WaitForUpstream == 0 {
		c.Pool.WaitForUpstream = time.Nanosecond // fail at once: the shortest wait there is
	}
	c.Pool = c.Pool.WithDefaults()
	if c.Listen.AdminToken == "" && c.Listen.AdminTokenEnv != "" {
		c.Listen.AdminToken = os.Getenv(c.Listen.AdminTokenEnv)
	}
	for i := range c.Clients {
		if c.Clients[i].Password == "" && c.Clients[i].PasswordEnv != "" {
			c.Clients[i].Password = os.Getenv(c.Clients[i].PasswordEnv)
		}
	}
}

func (c *Config) validate() ConfigErrors {
	var errs ConfigErrors
	add := func(line int, format string, a ...any) {
		errs = append(errs, ConfigError{File: c.path, Line: line, Msg: fmt.Sprintf(format, a...)})
	}
	errs = append(errs, c.listenErrors()...)
	if c.UpstreamCAFile != "" {
		if _, err := c.upstreamTLS(); err != nil {
			add(c.lines.key(toml.Key{"upstream_ca_file"}), "upstream_ca_file: %v", err)
		}
	}
	if c.Probe.CAFile != "" {
		if _, err := c.probeTLS(); err != nil {
			add(c.lines.key(toml.Key{"probe", "ca_file"}), "probe.ca_file: %v", err)
		}
	}
	if c.Listen.SOCKS5 == "" && c.Listen.HTTP == "" {
		add(c.lines.table("listen"), "listen: no front listener (socks5 or http) configured")
	}
	for _, d := range []struct {
		key toml.Key
		v   time.Duration
	}{
		{toml.Key{"listen", "handshake_timeout"}, c.Listen.HandshakeTimeout},
		{toml.Key{"shutdown_grace"}, c.ShutdownGrace},
		{toml.Key{"tunnel_idle_timeout"}, c.TunnelIdleTimeout},
	} {
		if d.v < 0 {
			add(c.lines.key(d.key), "%s: durations must not be negative", d.key)
		}
	}
	for _, l := range []struct {
		key string
		v   int
	}{{"max_connections", c.Listen.MaxConnections}, {"max_connections_per_ip", c.Listen.MaxConnectionsPerIP}} {
		if l.v < 0 {
			add(c.lines.key(toml.Key{"listen", l.key}), "listen.%s: must not be negative (0 = no cap)", l.key)
		}
	}
	if c.Metrics.PerUpstreamLimit < 0 {
		add(c.lines.key(toml.Key{"metrics", "per_upstream_limit"}), "metrics.per_upstream_limit: must not be negative (0 = no limit)")
	}
	usernames := map[string]int{}
	for i, cl := range c.Clients {
		line := c.elemKey("client", i, "username")
		user := shown(cl.Username)
		if cl.Username == "" {
			add(line, "client: username is required")
		}
		if prev, dup := usernames[cl.Username]; dup && cl.Username != "" {
			// Both passwords would log in: the second is most likely a
			// copy meant to be renamed, or a rotation left half-done.
			add(line, "client %q duplicates the one at line %d", user, prev)
		} else {
			usernames[cl.Username] = line
		}
		if strings.ContainsAny(cl.Username, ":") {
			add(line, "client %q: username must not contain ':'", user)
		}
		if p := parseUser(cl.Username); cl.Username != "" && p.User != cl.Username {
			// The fronts read these as username parameters and check
			// only what is before them: this client could never log in.
			add(line, "client %q: a username cannot contain \"-session-<id>\" or \"-tag-<tag>\" (rotor reads them as username parameters; this user could never log in)", user)
		}
		if c.Listen.SOCKS5 != "" && len(cl.Username) > 255 {
			add(line, "client: username is %d bytes; SOCKS5 (RFC 1929) carries at most 255", len(cl.Username))
		}
		if c.Listen.SOCKS5 != "" && len(cl.Password) > 255 {
			add(c.elemKey("client", i, "password"), "client %q: password is %d bytes; SOCKS5 (RFC 1929) carries at most 255", user, len(cl.Password))
		}
		if cl.Password == "" {
			if cl.PasswordEnv != "" {
				add(c.elemKey("client", i, "password_env"), "client %q: environment variable %s is empty or unset", user, shown(cl.PasswordEnv))
			} else {
				// At the password line when there is one (password = ""),
				// else at the [[client]] header.
				add(c.elemKey("client", i, "password"), "client %q: password (or password_env) is required", user)
			}
		}
	}
	// Each package reports every problem of its tables, each naming its
	// key: one error per problem, at that key's line.
	errs = append(errs, c.keyErrors(c.Pool.Validate(), c.lines.table("pool"))...)
	errs = append(errs, c.keyErrors((health.Config{Cooldown: c.Cooldown, Probe: c.Probe}).Validate(), c.lines.table("cooldown", "probe"))...)
	for _, s := range []struct{ table, scope string }{{"slow_body", c.SlowBody.Scope}, {"target_http_error", c.TargetHTTPError.Scope}} {
		if s.scope != "target" && s.scope != "upstream" {
			add(c.lines.key(toml.Key{s.table, "scope"}), "%s.scope: %q is not \"target\" or \"upstream\"", s.table, shown(s.scope))
		}
	}
	for _, st := range c.TargetHTTPError.Statuses {
		switch {
		case st < 100 || st > 599:
			add(c.lines.key(toml.Key{"target_http_error", "statuses"}), "target_http_error.statuses: %d is not an HTTP status", st)
		case st < 300: // 200 counted every answer as a ban
			add(c.lines.key(toml.Key{"target_http_error", "statuses"}), "target_http_error.statuses: %d is an interim or success status, not a ban (want 300-599)", st)
		}
	}
	errs = append(errs, c.keyErrors(c.Cluster.Validate(), c.lines.table("cluster"))...)
	if len(c.Upstreams) == 0 && len(c.UpstreamFiles) == 0 {
		add(0, "no [[upstream]] or [[upstream_file]] configured")
	}
	names := map[string]int{}
	keys := map[string]int{}
	for i, u := range c.Upstreams {
		for _, msg := range tagErrors(u.Tags) {
			add(c.elemKey("upstream", i, "tags"), "upstream tags: %s", msg)
		}
		if u.Name != "" || i < len(c.named) && c.named[i] {
			if err := upstream.CheckName(u.Name); err != nil {
				add(c.elemKey("upstream", i, "name"), "upstream name %q: %v", clip(u.Name, 60), err)
			}
		}
		line := c.elemKey("upstream", i, "url")
		spec, err := u.spec()
		if err != nil {
			line := c.lines.arrayTable("upstream", i)
			var ke *keyError
			if errors.As(err, &ke) && ke.key != "" {
				line = c.elemKey("upstream", i, ke.key)
			}
			add(line, "%v", err)
			// The entry's other keys are still checked (named by its
			// url as written, redacted).
			for _, n := range []struct {
				key string
				neg bool
			}{{"weight", u.Weight < 0}, {"max_conns", u.MaxConns < 0}, {"rate", u.Rate < 0}} {
				if n.neg {
					add(c.elemKey("upstream", i, n.key), "upstream %q: %s must not be negative", shown(redactURL(u.URL)), n.key)
				}
			}
			continue
		}
		// Each duplicate names the first entry, not the duplicate
		// before it (":6 duplicates the one at line 4" for a third copy).
		k := upstream.Identity(spec.URL)
		if first, dup := keys[k]; dup {
			add(line, "upstream %s duplicates the one at line %d", shown(upstream.Redact(spec.URL)), first)
		} else {
			keys[k] = line
		}
		if u.Name != "" {
			nameLine := c.elemKey("upstream", i, "name")
			if first, dup := names[u.Name]; dup {
				add(nameLine, "upstream name %q duplicates the one at line %d", shown(u.Name), first)
			} else {
				names[u.Name] = nameLine
			}
		}
		for _, n := range []struct {
			key string
			neg bool
		}{{"weight", u.Weight < 0}, {"max_conns", u.MaxConns < 0}, {"rate", u.Rate < 0}} {
			if n.neg {
				add(c.elemKey("upstream", i, n.key), "upstream %s: %s must not be negative", shown(upstream.Redact(spec.URL)), n.key)
			}
		}
	}
	for i, f := range c.UpstreamFiles {
		for _, msg := range tagErrors(f.Tags) {
			add(c.elemKey("upstream_file", i, "tags"), "upstream_file tags: %s", msg)
		}
		if f.Path == "" {
			add(c.elemKey("upstream_file", i, "path"), "upstream_file: path is required")
		}
		switch f.Scheme {
		case "", "http", "https", "socks5", "socks5h":
		default:
			add(c.elemKey("upstream_file", i, "scheme"), "upstream_file: scheme %q is not socks5, http or https", shown(f.Scheme))
		}
		if f.Pipeline && f.Scheme != "socks5" && f.Scheme != "socks5h" {
			add(c.elemKey("upstream_file", i, "pipeline"), "upstream_file: pipeline = true needs scheme = \"socks5\" (it applies to socks5 upstreams only)")
		}
	}
	return errs
}

// tagErrors says what is wrong with each tag a client could never ask
// for: a client names tags in its proxy username ("scraper-tag-us"), where
// '-' separates the parameters, and an HTTP client's username ends at its
// first ':' (RFC 7617). Such a tag was silently dropped from the request
// (the whole username taken as a user name).
func tagErrors(tags []string) []string {
	var msgs []string
	for _, t := range tags {
		switch {
		case t == "":
			msgs = append(msgs, "a tag must not be empty")
		case strings.Contains(t, "-"):
			msgs = append(msgs, fmt.Sprintf("tag %q contains '-', which separates username parameters: no client could ask for it (use letters, digits, '_' or '.')", shown(t)))
		case strings.IndexFunc(t, func(r rune) bool { return r == ':' || unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
			msgs = append(msgs, fmt.Sprintf("tag %q contains white space, ':' or a control character, which a proxy username cannot carry", shown(t)))
		}
	}
	return msgs
}
