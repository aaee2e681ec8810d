package health

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Config configures a Tracker. Zero values take the documented defaults;
// NewTracker copies it and fills them in. Tracker.SetConfig replaces it on
// a running tracker (config reload); its doc says when each field applies.
type Config struct {
	// Cooldown is the [cooldown] table.
	Cooldown CooldownConfig
	// Probe is the [probe] table.
	Probe ProbeConfig
	// SlowStart is how long a recovered record's ramp lasts (pool.slow_start):
	// one re-admitted after a failure set it aside; a first admission and
	// a record that did not fail have none.
	// Default 30s; negative disables the ramp.
	SlowStart time.Duration
	// SlowStartRate is the ramp's first-second cap on new tunnels. Default 4;
	// it doubles every second until SlowStart has elapsed.
	SlowStartRate int
	// HistoryLen bounds each record's transition history. Default 32.
	HistoryLen int
	// StartEligible makes new records start eligible instead of
	// probe_allowed (pool.start_eligible). Default false: nothing unverified
	// serves traffic.
	StartEligible bool

	// ScopeTargetHTTPError is [target_http_error] scope: with ScopeTarget a
	// target_http_error that names its target host cools the upstream for
	// that host only. Default ScopeTarget (a site banning one exit says
	// nothing about the exit's health for other sites, issue 9).
	ScopeTargetHTTPError Scope
	// ScopeSlowBody is [slow_body] scope. Default ScopeUpstream: a slow exit
	// is usually slow for every site.
	ScopeSlowBody Scope
	// MaxTargets bounds the per-target cooldowns one record keeps; when
	// full the oldest is dropped and counted. Default 256.
	MaxTargets int

	// TargetRuleHosts is the number of distinct target hosts for which one
	// record must report target failures (target_unreachable,
	// target_timeout) while other records reached the same hosts, within
	// TargetRuleWindow, before the record itself is cooled as
	// upstream_error at stage target_connect. Default 2; negative disables
	// the rule. See Tracker.Fail.
	TargetRuleHosts int
	// TargetRuleWindow is the window of the target-failure rule. Default 60s.
	TargetRuleWindow time.Duration

	// Rand returns jitter samples in [0, 1). Nil means math/rand/v2.
	// Tests set it for exact cooldowns.
	Rand func() float64 `toml:"-"`
}

// Scope says what a failure cools: the whole upstream or only the target
// host it was reported for.
type Scope uint8

// Scopes. ScopeDefault (the zero value) takes the class's default.
// ScopePort is never configured (UnmarshalText refuses it): it marks a
// Failure that refuses one host:port (see Failure.Scope).
const (
	ScopeDefault Scope = iota
	ScopeUpstream
	ScopeTarget
	ScopePort
)

var scopeNames = [...]string{ScopeDefault: "", ScopeUpstream: "upstream", ScopeTarget: "target", ScopePort: "port"}

// String returns the config string ("upstream", "target"; "" for the default).
func (s Scope) String() string {
	if int(s) < len(scopeNames) {
		return scopeNames[s]
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// MarshalText encodes the scope as its config string.
func (s Scope) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses "upstream" or "target".
func (s *Scope) UnmarshalText(b []byte) error {
	switch string(b) {
	case "upstream":
		*s = ScopeUpstream
	case "target":
		*s = ScopeTarget
	default:
		return fmt.Errorf("unknown scope %q (want \"upstream\" or \"target\")", b)
	}
	return nil
}

// CooldownConfig is the [cooldown] table: shared knobs and one policy per
// class. The per-class defaults and their reasons are on DefaultCooldowns.
type CooldownConfig struct {
	// Multiplier grows a class's cooldown per consecutive cooling without a
	// passing probe in between. Default 2; must be >= 1.
	Multiplier float64 `toml:"multiplier"`
	// Jitter is the ± fraction applied to each cooldown, in [0, 1). Default
	// 0.2 (±20%), so records that failed together do not come due together.
	// Set a negative value for no jitter.
	Jitter float64 `toml:"jitter"`

	Refused         ClassPolicy `toml:"refused"`
	Timeout         ClassPolicy `toml:"timeout"`
	AuthRejected    ClassPolicy `toml:"auth_rejected"`
	UpstreamError   ClassPolicy `toml:"upstream_error"`
	SlowBody        ClassPolicy `toml:"slow_body"`
	TargetHTTPError ClassPolicy `toml:"target_http_error"`
}

// ClassPolicy is one [cooldown.<class>] table. Zero fields take the class's
// default from DefaultCooldowns.
type ClassPolicy struct {
	// Base is the first cooldown of a streak.
	Base time.Duration `toml:"base"`
	// Max bounds every cooldown of the class, jitter included; >= Base.
	Max time.Duration `toml:"max"`
	// After is how many consecutive failures of the class (no success in
	// between) an eligible record may report before it cools. Default 1.
	After int `toml:"after"`
	// PermanentAfter, when > 0, moves the record to disabled (reason kept)
	// after that many consecutive failures of the class without a success
	// or passing probe, probe failures included. 0 (default) never does.
	PermanentAfter int `toml:"permanent_after"`
}

// ProbeConfig is the [probe] table.
type ProbeConfig struct {
	// URL is fetched through the upstream under test: http or https with a
	// host. Empty means no probe: records whose cooldown ended (and new
	// records) are re-admitted without one, with a warning logged once per
	// Run. The gateway has no default URL (rotor cannot know a target
	// every user's upstreams may reach, and must send nothing anywhere
	// unasked); it warns at start and in -check when none is set.
	URL string `toml:"url"`
	// ExpectStatus lists the statuses that pass. Default [200].
	ExpectStatus []int `toml:"expect_status"`
	// ExpectBody, when set, must occur in the first 64 KiB of the body.
	ExpectBody string `toml:"expect_body"`
	// Timeout bounds a whole probe: dial, proxy handshake, TLS, request and
	// response. Default 5s.
	Timeout time.Duration `toml:"timeout"`
	// MaxConcurrent bounds probes in flight across the tracker. Default 8.
	MaxConcurrent int `toml:"max_concurrent"`
	// Rate bounds probe starts per second across the tracker; starts are
	// spaced 1/Rate apart, so no second ever sees more than Rate (rounded
	// up). Default 10.
	Rate float64 `toml:"rate"`
	// CAFile is a PEM file of CA certificates trusted, besides the
	// system's, for an https probe URL (a probe target with a private
	// CA). The gateway reads it (a path relative to the config file) into TLS.
	CAFile string `toml:"ca_file"`
	// TLS is the client TLS config for https probe URLs (nil: system roots,
	// ServerName from the URL). Not part of the TOML.
	TLS *tls.Config `toml:"-"`
}

// Defaults for the shared knobs.
const (
	DefaultMultiplier       = 2.0
	DefaultJitter           = 0.2
	DefaultSlowStart        = 30 * time.Second
	DefaultSlowStartRate    = 4
	DefaultHistoryLen       = 32
	DefaultMaxTargets       = 256
	DefaultTargetRuleHosts  = 2
	DefaultTargetRuleWindow = 60 * time.Second
	DefaultProbeTimeout     = 5 * time.Second
	DefaultProbeConcurrent  = 8
	DefaultProbeRate        = 10.0
)

// withDefaults returns a copy of c with zero values replaced by defaults.
func (c Config) withDefaults() Config {
	c.Cooldown = c.Cooldown.withDefaults()
	c.Probe = c.Probe.withDefaults()
	if c.SlowStart == 0 {
		c.SlowStart = DefaultSlowStart
	}
	if c.SlowStartRate <= 0 {
		c.SlowStartRate = DefaultSlowStartRate
	}
	if c.HistoryLen <= 0 {
		c.HistoryLen = DefaultHistoryLen
	}
	if c.ScopeTargetHTTPError == ScopeDefault {
		c.ScopeTargetHTTPError = ScopeTarget
	}
	if c.ScopeSlowBody == ScopeDefault {
		c.ScopeSlowBody = ScopeUpstream
	}
	if c.MaxTargets <= 0 {
		c.MaxTargets = DefaultMaxTargets
	}
	if c.TargetRuleHosts == 0 {
		c.TargetRuleHosts = DefaultTargetRuleHosts
	}
	if c.TargetRuleWindow <= 0 {
		c.TargetRuleWindow = DefaultTargetRuleWindow
	}
	return c
}

func (c CooldownConfig) withDefaults() CooldownConfig {
	if c.Multiplier == 0 {
		c.Multiplier = DefaultMultiplier
	}
	switch {
	case c.Jitter == 0:
		c.Jitter = DefaultJitter
	case c.Jitter < 0:
		c.Jitter = 0
	}
	d := DefaultCooldowns()
	c.Refused = c.Refused.withDefaults(d.Refused)
	c.Timeout = c.Timeout.withDefaults(d.Timeout)
	c.AuthRejected = c.AuthRejected.withDefaults(d.AuthRejected)
	c.UpstreamError = c.UpstreamError.withDefaults(d.UpstreamError)
	c.SlowBody = c.SlowBody.withDefaults(d.SlowBody)
	c.TargetHTTPError = c.TargetHTTPError.withDefaults(d.TargetHTTPError)
	return c
}

func (p ClassPolicy) withDefaults(d ClassPolicy) ClassPolicy {
	if p.Base == 0 {
		p.Base = d.Base
	}
	if p.Max == 0 {
		p.Max = max(d.Max, p.Base)
	}
	if p.After <= 0 {
		p.After = d.After
	}
	return p
}

func (p ProbeConfig) withDefaults() ProbeConfig {
	if len(p.ExpectStatus) == 0 {
		p.ExpectStatus = []int{200}
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultProbeTimeout
	}
	if p.MaxConcurrent <= 0 {
		p.MaxConcurrent = DefaultProbeConcurrent
	}
	if p.Rate <= 0 {
		p.Rate = DefaultProbeRate
	}
	return p
}

// Validate reports every problem in c, joined. Zero values are valid (they
// take defaults).
func (c Config) Validate() error {
	var errs []error
	if err := c.Cooldown.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Probe.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.SlowStartRate < 0 {
		errs = append(errs, fmt.Errorf("slow_start_rate: must not be negative (got %d)", c.SlowStartRate))
	}
	if c.HistoryLen < 0 {
		errs = append(errs, fmt.Errorf("history_len: must not be negative (got %d)", c.HistoryLen))
	}
	if c.MaxTargets < 0 {
		errs = append(errs, fmt.Errorf("max_targets: must not be negative (got %d)", c.MaxTargets))
	}
	if c.TargetRuleWindow < 0 {
		errs = append(errs, fmt.Errorf("target_rule_window: must not be negative (got %s)", c.TargetRuleWindow))
	}
	for _, s := range []struct {
		key   string
		scope Scope
	}{{"target_http_error.scope", c.ScopeTargetHTTPError}, {"slow_body.scope", c.ScopeSlowBody}} {
		if s.scope > ScopeTarget {
			errs = append(errs, keyErr(s.key, "unknown scope %d", s.scope))
		}
	}
	return errors.Join(errs...)
}

// KeyError is one invalid config key: Key is its dotted TOML name
// ("cooldown.refused.max"), Err what is wrong with its value. The other
// packages' Validate methods return it too (upstream.KeyError and
// cluster.KeyError are this type), so a config check finds every key's
// line the same way.
type KeyError struct {
	Key string
	Err error
	// Uses (optional) names the other keys a cross-field check read
	// ("cooldown.refused.base" for max >= base): when one of them held an
	// invalid value, a config check leaves the error out, since the
	// default that stood in for it was never the user's.
	Uses []string
}

func (e *KeyError) Error() string { return e.Key + ": " + e.Err.Error() }
func (e *KeyError) Unwrap() error { return e.Err }

// ConfigKey returns Key; config checks find the key's line with it.
func (e *KeyError) ConfigKey() string { return e.Key }

// ConfigUses returns Uses.
func (e *KeyError) ConfigUses() []string { return e.Uses }

// KeyErr returns a *KeyError for key, its message formatted.
func KeyErr(key, format string, a ...any) error { return keyErr(key, format, a...) }

// keyErr returns a *KeyError for key.
func keyErr(key, format string, a ...any) error {
	return &KeyError{Key: key, Err: fmt.Errorf(format, a...)}
}

// Validate checks the shared knobs and every class table. It reports
// every problem, joined; each is a *KeyError naming its key
// ("cooldown.refused.max").
func (c CooldownConfig) Validate() error {
	var errs []error
	if c.Multiplier != 0 && c.Multiplier < 1 {
		errs = append(errs, keyErr("cooldown.multiplier", "must be >= 1 (got %g)", c.Multiplier))
	}
	if c.Jitter >= 1 {
		errs = append(errs, keyErr("cooldown.jitter", "must be in [0, 1) (got %g)", c.Jitter))
	}
	d := DefaultCooldowns()
	for _, p := range []struct {
		name string
		p, d ClassPolicy
	}{
		{"refused", c.Refused, d.Refused},
		{"timeout", c.Timeout, d.Timeout},
		{"auth_rejected", c.AuthRejected, d.AuthRejected},
		{"upstream_error", c.UpstreamError, d.UpstreamError},
		{"slow_body", c.SlowBody, d.SlowBody},
		{"target_http_error", c.TargetHTTPError, d.TargetHTTPError},
	} {
		errs = append(errs, p.p.validate("cooldown."+p.name, p.d)...)
	}
	return errors.Join(errs...)
}

func (p ClassPolicy) validate(key string, d ClassPolicy) []error {
	var errs []error
	if p.Base < 0 {
		errs = append(errs, keyErr(key+".base", "must not be negative (got %s)", p.Base))
	}
	if p.Max < 0 {
		errs = append(errs, keyErr(key+".max", "must not be negative (got %s)", p.Max))
	}
	if p.After < 0 {
		errs = append(errs, keyErr(key+".after", "must not be negative (got %d)", p.After))
	}
	if p.PermanentAfter < 0 {
		errs = append(errs, keyErr(key+".permanent_after", "must not be negative (got %d)", p.PermanentAfter))
	}
	// Compare the effective values, so "base = 20m" alone against a
	// default max of 10m is reported rather than silently raised. A
	// negative value was reported above; comparing with it would only
	// repeat that.
	eff, maxNote := p, ""
	if eff.Base == 0 {
		eff.Base = d.Base
	}
	if eff.Max == 0 {
		eff.Max, maxNote = d.Max, " (default)"
	}
	if eff.After == 0 {
		eff.After = d.After
	}
	if eff.Base >= 0 && eff.Max >= 0 && eff.Max < eff.Base {
		errs = append(errs, &KeyError{Key: key + ".max", Uses: []string{key + ".base"},
			Err: fmt.Errorf("must be >= base (max %s%s, base %s)", eff.Max, maxNote, eff.Base)})
	}
	if p.PermanentAfter > 0 && eff.After > 0 && p.PermanentAfter < eff.After {
		errs = append(errs, &KeyError{Key: key + ".permanent_after", Uses: []string{key + ".after"},
			Err: fmt.Errorf("must be >= after (permanent_after %d, after %d)", p.PermanentAfter, eff.After)})
	}
	return errs
}

// Validate checks the [probe] table. An empty URL is valid (see URL). It
// reports every problem, joined; each is a *KeyError naming its key.
func (p ProbeConfig) Validate() error {
	var errs []error
	if p.URL != "" {
		if _, err := parseProbeURL(p.URL); err != nil {
			errs = append(errs, &KeyError{Key: "probe.url", Err: err})
		}
	}
	for _, s := range p.ExpectStatus {
		switch {
		case s < 100 || s > 599:
			errs = append(errs, keyErr("probe.expect_status", "%d is not an HTTP status code", s))
		case s < 200:
			// The probe's client reads past interim answers: a 1xx is
			// never the status it sees, so no probe would ever pass.
			errs = append(errs, keyErr("probe.expect_status", "%d is an interim (1xx) status, never a probe's answer", s))
		}
	}
	if p.Timeout < 0 {
		errs = append(errs, keyErr("probe.timeout", "must not be negative (got %s)", p.Timeout))
	}
	if p.MaxConcurrent < 0 {
		errs = append(errs, keyErr("probe.max_concurrent", "must not be negative (got %d)", p.MaxConcurrent))
	}
	if p.Rate < 0 {
		errs = append(errs, keyErr("probe.rate", "must not be negative (got %g)", p.Rate))
	}
	return errors.Join(errs...)
}

func parseProbeURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		// Only the reason: net/url quotes the URL, which may carry a
		// password (refused below, but the message would show it).
		var ue *url.Error
		if errors.As(err, &ue) {
			return nil, fmt.Errorf("invalid URL (%s)", dropQuoted(ue.Err.Error()))
		}
		return nil, errors.New("invalid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme must be http or https (got %q)", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("missing host")
	}
	if u.User != nil {
		return nil, errors.New("must not carry userinfo")
	}
	if err := checkProbeHost(u.Hostname()); err != nil {
		return nil, err
	}
	// net/url takes any run of digits as the port: ":0" and ":99999"
	// parse, and the dialers then refuse the target, which cooled every
	// upstream with "invalid target address" for rotor's own mistake.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, errors.New("invalid port (want 1-65535)")
		}
	}
	// The request line is "GET " + RequestURI + " HTTP/1.1": net/url
	// escapes a space in the path but leaves one in the query as is.
	if strings.Contains(u.RawQuery, " ") {
		return nil, errors.New("space in the query (percent-encode it as %20)")
	}
	return u, nil
}

// checkProbeHost refuses a probe host that the upstream dialers would
// refuse as a target (upstream's checkTargetHost, which health cannot
// import): longer than 255 bytes (RFC 1928 §5), an IP literal with a
// zone, or a name with a byte outside RFC 3986 §3.2.2's reg-name.
func checkProbeHost(host string) error {
	if len(host) > 255 {
		return errors.New("host name longer than 255 bytes")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if ip.Zone() != "" {
			return errors.New("host must not carry an IPv6 zone")
		}
		return nil
	}
	for i := 0; i < len(host); i++ {
		c := host[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-._~!$&'()*+,;=", c) >= 0 {
			continue
		}
		if c > ' ' && c < 0x7f {
			return fmt.Errorf("invalid character '%c' in host name", c)
		}
		return fmt.Errorf("invalid character %#02x in host name", c)
	}
	return nil
}

// dropQuoted removes the double-quoted parts of s and the space before
// each: `invalid port ":x" after host` becomes `invalid port after host`.
func dropQuoted(s string) string {
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			return s
		}
		j := strings.IndexByte(s[i+1:], '"')
		if j < 0 {
			return strings.TrimSpace(s[:i])
		}
		s = strings.TrimRight(s[:i], " ") + s[i+1+j+1:]
	}
}
