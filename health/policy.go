package health

import (
	"math"
	"time"
)

// DefaultCooldowns returns the built-in [cooldown.<class>] tables. There is
// no universal "proxy cooldown": each class says something different about
// how soon the upstream is likely to work again.
//
//   - refused (30s, max 10m): nothing listens on the proxy port. The proxy
//     process is down or restarting; restarts take seconds to a minute, so
//     30s rarely wastes a healthy restart, and doubling reaches 10m within
//     five failed probes for a host that is really gone. Refusals are cheap
//     to detect, so probing a dead host every 10m costs nothing.
//   - timeout (15s, max 5m): the most often transient class (a congested
//     link, one slow handshake, a busy residential exit). The base is short
//     so one missed deadline costs little; the max is lower than the others
//     because timeouts flap and a long ban would idle a mostly good exit.
//   - auth_rejected (5m, max 1h): credentials do not fix themselves in
//     seconds; they change when a plan is renewed, topped up or rotated,
//     which takes minutes to hours. Retrying faster only adds failed logins
//     that some providers count against the account. permanent_after is
//     off by default (a provider outage sometimes answers 407 to everyone);
//     set it (e.g. 3) to park such upstreams as disabled for an operator.
//   - upstream_error (30s, max 10m): protocol garbage, unexpected closes,
//     5xx from the proxy itself. Usually overload or a broken node; treated
//     like refused.
//   - slow_body (30s, max 10m): the exit works but stalls; overloaded exits
//     recover as load moves elsewhere, which takes tens of seconds.
//   - target_http_error (60s, max 30m): a site answered 403/429/503, i.e. it
//     rate-limits or bans the exit. Such bans and Retry-After windows start
//     around a minute and commonly last tens of minutes, hence the longest
//     max. With scope "target" (the default) only that site is affected.
//
// After is 1 for every class: a single classified failure already carries
// its evidence (issue 3: cool for a recorded time rather than keep trying).
func DefaultCooldowns() CooldownConfig {
	return CooldownConfig{
		Multiplier:      DefaultMultiplier,
		Jitter:          DefaultJitter,
		Refused:         ClassPolicy{Base: 30 * time.Second, Max: 10 * time.Minute, After: 1},
		Timeout:         ClassPolicy{Base: 15 * time.Second, Max: 5 * time.Minute, After: 1},
		AuthRejected:    ClassPolicy{Base: 5 * time.Minute, Max: time.Hour, After: 1},
		UpstreamError:   ClassPolicy{Base: 30 * time.Second, Max: 10 * time.Minute, After: 1},
		SlowBody:        ClassPolicy{Base: 30 * time.Second, Max: 10 * time.Minute, After: 1},
		TargetHTTPError: ClassPolicy{Base: 60 * time.Second, Max: 30 * time.Minute, After: 1},
	}
}

// Policy is the resolved cooldown policy: defaults filled, one ClassPolicy
// per cooling class. It is a value; methods are pure.
type Policy struct {
	multiplier float64
	jitter     float64
	classes    [numClasses]ClassPolicy
}

// Policy resolves c (defaults filled) into a Policy.
func (c CooldownConfig) Policy() Policy { return policyOf(c.withDefaults()) }

// policyOf builds a Policy from a config whose defaults are already filled
// (withDefaults is not idempotent for a negative Jitter, which means none).
func policyOf(c CooldownConfig) Policy {
	p := Policy{multiplier: c.Multiplier, jitter: c.Jitter}
	p.classes[Refused] = c.Refused
	p.classes[Timeout] = c.Timeout
	p.classes[AuthRejected] = c.AuthRejected
	p.classes[UpstreamError] = c.UpstreamError
	p.classes[SlowBody] = c.SlowBody
	p.classes[TargetHTTPError] = c.TargetHTTPError
	return p
}

// For returns the policy of class c. Classes without a table of their own
// (target failures, none, operator) use upstream_error's: they only cool an
// upstream through rules that blame it as an upstream error.
func (p Policy) For(c Class) ClassPolicy {
	if c >= numClasses || p.classes[c].Base == 0 && p.classes[c].Max == 0 {
		return p.classes[UpstreamError]
	}
	return p.classes[c]
}

// Cooldown is the cooldown for the consecutive-th cooling of class c since
// the last passing probe (1 for the first; values below 1 count as 1):
// Base × Multiplier^(consecutive-1), capped at Max, then scaled by the
// jitter factor 1 + Jitter×(2×jitterSample−1) and capped at Max again.
// jitterSample is a uniform sample in [0, 1) (clamped; NaN counts as
// 0.5); 0.5 means no jitter.
// The growth is computed in float64, so a huge consecutive count saturates
// at Max instead of overflowing time.Duration.
func (p Policy) Cooldown(c Class, consecutive int, jitterSample float64) time.Duration {
	cp := p.For(c)
	if consecutive < 1 {
		consecutive = 1
	}
	hi := float64(cp.Max)
	d := float64(cp.Base) * math.Pow(p.multiplier, float64(consecutive-1))
	if math.IsNaN(d) || d > hi {
		d = hi // +Inf (overflow) lands here too
	}
	s := jitterSample
	if math.IsNaN(s) {
		s = 0.5
	}
	s = min(max(s, 0), 1)
	d *= 1 + p.jitter*(2*s-1)
	// Compare in float64 but return Max itself: float64(Max) may round up
	// past the largest Duration.
	switch {
	case d >= hi:
		return cp.Max
	case d <= 0:
		return 0
	}
	return time.Duration(d)
}
