package gateway

// Values written in the file that cannot mean what they say. The packages
// read a zero field as "use the default" (their constructors fill it), so
// a zero the file sets was silently the default: pool.max_attempts = 0
// tried 3 upstreams, probe.rate = 0 started 10 probes a second, probe.timeout
// = "0s" waited 5 s. Where zero has a meaning of its own, fill gives it
// that meaning (wait_for_upstream, slow_start, jitter, shutdown_grace,
// slow_body: none); where it is documented (0 = unlimited, never, no cap)
// the packages already take it so. Everywhere else it is an error here.

import (
	"fmt"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/rotor-proxy/rotor/cluster"
	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// explicitErrors reports, at its line, each value the file sets that
// cannot mean what it says: a zero where zero has no meaning but the
// default, and a negative duration where "0s" is the documented way to
// turn the thing off. md says which keys the file sets; weighted[i] is
// whether the i-th [[upstream]] sets weight. It runs before fill, on the
// values as written.
func (c *Config) explicitErrors(md *toml.MetaData, weighted []bool) ConfigErrors {
	var errs ConfigErrors
	bad := func(key toml.Key, format string, a ...any) {
		errs = append(errs, ConfigError{File: c.path, Line: c.lines.key(key), Msg: key.String() + ": " + fmt.Sprintf(format, a...)})
	}
	set := func(key toml.Key) bool { return md.IsDefined(key...) }
	pool := upstream.PoolConfig{}.WithDefaults()
	type duration struct {
		key    toml.Key
		v, def time.Duration
	}
	durations := []duration{
		{toml.Key{"listen", "handshake_timeout"}, c.Listen.HandshakeTimeout, 10 * time.Second},
		{toml.Key{"pool", "connect_timeout"}, c.Pool.ConnectTimeout, pool.ConnectTimeout},
		{toml.Key{"pool", "handshake_timeout"}, c.Pool.HandshakeTimeout, pool.HandshakeTimeout},
		{toml.Key{"pool", "session_ttl"}, c.Pool.SessionTTL, pool.SessionTTL},
		{toml.Key{"probe", "timeout"}, c.Probe.Timeout, health.DefaultProbeTimeout},
		{toml.Key{"cluster", "lease_ttl"}, c.Cluster.LeaseTTL, cluster.DefaultLeaseTTL},
		{toml.Key{"cluster", "max_clock_skew"}, c.Cluster.MaxClockSkew, cluster.DefaultMaxClockSkew},
		{toml.Key{"cluster", "resync"}, c.Cluster.Resync, cluster.DefaultResync},
	}
	d := health.DefaultCooldowns()
	for _, p := range []struct {
		class   string
		p, dflt health.ClassPolicy
	}{
		{"refused", c.Cooldown.Refused, d.Refused},
		{"timeout", c.Cooldown.Timeout, d.Timeout},
		{"auth_rejected", c.Cooldown.AuthRejected, d.AuthRejected},
		{"upstream_error", c.Cooldown.UpstreamError, d.UpstreamError},
		{"slow_body", c.Cooldown.SlowBody, d.SlowBody},
		{"target_http_error", c.Cooldown.TargetHTTPError, d.TargetHTTPError},
	} {
		durations = append(durations,
			duration{toml.Key{"cooldown", p.class, "base"}, p.p.Base, p.dflt.Base},
			duration{toml.Key{"cooldown", p.class, "max"}, p.p.Max, p.dflt.Max})
		if k := (toml.Key{"cooldown", p.class, "after"}); set(k) && p.p.After == 0 {
			bad(k, "must be >= 1 (got 0; %d when left out)", p.dflt.After)
		}
	}
	for _, x := range durations {
		if set(x.key) && x.v == 0 {
			bad(x.key, "must be more than 0s (%s when left out)", x.def)
		}
	}
	for _, n := range []struct {
		key      toml.Key
		zero     bool
		min, def string
	}{
		{toml.Key{"pool", "max_attempts"}, c.Pool.MaxAttempts == 0, ">= 1", fmt.Sprint(pool.MaxAttempts)},
		{toml.Key{"pool", "retry_body_limit"}, c.Pool.RetryBodyLimit == 0, ">= 1", fmt.Sprint(pool.RetryBodyLimit)},
		{toml.Key{"probe", "max_concurrent"}, c.Probe.MaxConcurrent == 0, ">= 1", fmt.Sprint(health.DefaultProbeConcurrent)},
		{toml.Key{"probe", "rate"}, c.Probe.Rate == 0, "more than 0", fmt.Sprint(health.DefaultProbeRate)},
		{toml.Key{"cooldown", "multiplier"}, c.Cooldown.Multiplier == 0, ">= 1", fmt.Sprint(health.DefaultMultiplier)},
		{toml.Key{"cluster", "history"}, c.Cluster.History == 0, ">= 1", fmt.Sprint(cluster.DefaultHistory)},
	} {
		if set(n.key) && n.zero {
			bad(n.key, "must be %s (got 0; %s when left out)", n.min, n.def)
		}
	}
	if k := (toml.Key{"probe", "expect_status"}); set(k) && len(c.Probe.ExpectStatus) == 0 {
		bad(k, "must list at least one status ([200] when left out)")
	}
	// "0s" is the off switch of these; a negative value is no duration.
	if k := (toml.Key{"pool", "slow_start"}); c.Pool.SlowStart < 0 {
		bad(k, "must not be negative (got %s; \"0s\": no ramp)", c.Pool.SlowStart)
	}
	for _, x := range []struct {
		key string
		v   time.Duration
	}{{"first_byte", c.SlowBody.FirstByte}, {"stall", c.SlowBody.Stall}} {
		if x.v < 0 {
			bad(toml.Key{"slow_body", x.key}, "must not be negative (got %s; \"0s\" turns the check off)", x.v)
		}
	}
	for i, u := range c.Upstreams {
		if i < len(weighted) && weighted[i] && u.Weight == 0 {
			errs = append(errs, ConfigError{File: c.path, Line: c.elemKey("upstream", i, "weight"),
				Msg: fmt.Sprintf("upstream %s: weight must be >= 1 (got 0; 1 when left out; disabled = true takes an upstream out of rotation)", shown(redactURL(u.URL)))})
		}
	}
	return errs
}
