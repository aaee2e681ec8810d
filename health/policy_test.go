package health

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestCooldownSequence(t *testing.T) {
	p := CooldownConfig{}.Policy() // defaults: multiplier 2
	tests := []struct {
		class Class
		want  []time.Duration // consecutive 1, 2, 3, ...
	}{
		{Refused, []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}},
		{Timeout, []time.Duration{15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 5 * time.Minute}},
		{AuthRejected, []time.Duration{5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour}},
		{UpstreamError, []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute}},
		{SlowBody, []time.Duration{30 * time.Second, time.Minute}},
		{TargetHTTPError, []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}},
		{TargetUnreachable, []time.Duration{30 * time.Second}}, // upstream_error's policy
	}
	for _, tt := range tests {
		t.Run(tt.class.String(), func(t *testing.T) {
			for i, want := range tt.want {
				if got := p.Cooldown(tt.class, i+1, 0.5); got != want {
					t.Errorf("Cooldown(%v, %d) = %v, want %v", tt.class, i+1, got, want)
				}
			}
		})
	}
}

func TestCooldownEdges(t *testing.T) {
	p := CooldownConfig{Multiplier: 3, Refused: ClassPolicy{Base: time.Second, Max: time.Hour}}.Policy()
	tests := []struct {
		name        string
		consecutive int
		want        time.Duration
	}{
		{"zero counts as first", 0, time.Second},
		{"negative counts as first", -5, time.Second},
		{"multiplier 3", 3, 9 * time.Second},
		{"huge saturates without overflow", math.MaxInt, time.Hour},
		{"past int64 nanoseconds", 1000, time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Cooldown(Refused, tt.consecutive, 0.5); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	one := CooldownConfig{Multiplier: 1}.Policy()
	if got := one.Cooldown(Refused, 50, 0.5); got != 30*time.Second {
		t.Errorf("multiplier 1: got %v, want constant 30s", got)
	}
}

func TestCooldownJitterBounds(t *testing.T) {
	p := CooldownConfig{}.Policy() // jitter 0.2
	tests := []struct {
		name        string
		consecutive int
		sample      float64
		want        time.Duration
	}{
		{"low end", 1, 0, 24 * time.Second},
		{"centre", 1, 0.5, 30 * time.Second},
		{"high end", 1, 1, 36 * time.Second},
		{"below range clamps", 1, -3, 24 * time.Second},
		{"above range clamps", 1, 7, 36 * time.Second},
		{"never past max", 6, 1, 10 * time.Minute},
		{"below max at cap", 6, 0, 8 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Cooldown(Refused, tt.consecutive, tt.sample); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
	for i := range 1000 {
		s := float64(i) / 1000
		for n := 1; n < 10; n++ {
			got := p.Cooldown(Refused, n, s)
			base := p.Cooldown(Refused, n, 0.5)
			lo, hi := time.Duration(float64(base)*0.8), min(time.Duration(float64(base)*1.2), 10*time.Minute)
			if got < lo-1 || got > hi+1 {
				t.Fatalf("Cooldown(%d, %v) = %v outside [%v, %v]", n, s, got, lo, hi)
			}
		}
	}
	if got := (CooldownConfig{Jitter: -1}).Policy().Cooldown(Refused, 1, 0); got != 30*time.Second {
		t.Errorf("negative jitter (none): got %v, want 30s", got)
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if c.SlowStart != 30*time.Second || c.SlowStartRate != 4 || c.HistoryLen != 32 ||
		c.MaxTargets != 256 || c.TargetRuleHosts != 2 || c.TargetRuleWindow != time.Minute {
		t.Errorf("pool defaults: %+v", c)
	}
	if c.ScopeTargetHTTPError != ScopeTarget || c.ScopeSlowBody != ScopeUpstream {
		t.Errorf("scopes: %v %v", c.ScopeTargetHTTPError, c.ScopeSlowBody)
	}
	p := c.Probe
	if p.Timeout != 5*time.Second || p.MaxConcurrent != 8 || p.Rate != 10 || len(p.ExpectStatus) != 1 || p.ExpectStatus[0] != 200 {
		t.Errorf("probe defaults: %+v", p)
	}
	if c.Cooldown.Multiplier != 2 || c.Cooldown.Jitter != 0.2 {
		t.Errorf("cooldown defaults: %+v", c.Cooldown)
	}
	if c.Cooldown.AuthRejected != (ClassPolicy{Base: 5 * time.Minute, Max: time.Hour, After: 1}) {
		t.Errorf("auth_rejected: %+v", c.Cooldown.AuthRejected)
	}
	// A base above the default max raises the max rather than inverting.
	got := (CooldownConfig{Refused: ClassPolicy{Base: time.Hour}}).withDefaults().Refused
	if got.Max != time.Hour {
		t.Errorf("base above default max: max = %v", got.Max)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" means valid
	}{
		{"zero is valid", Config{}, ""},
		{"full valid", Config{
			Cooldown: CooldownConfig{Multiplier: 1.5, Jitter: 0.5, AuthRejected: ClassPolicy{Base: time.Minute, Max: time.Hour, After: 2, PermanentAfter: 3}},
			Probe:    ProbeConfig{URL: "https://probe.example:8443/health?x=1", ExpectStatus: []int{200, 204}, Timeout: time.Second, MaxConcurrent: 2, Rate: 0.5},
		}, ""},
		{"max below base", Config{Cooldown: CooldownConfig{Refused: ClassPolicy{Base: time.Minute, Max: time.Second}}}, "cooldown.refused.max: must be >= base"},
		{"base above default max", Config{Cooldown: CooldownConfig{Timeout: ClassPolicy{Base: time.Hour}}}, "cooldown.timeout.max"},
		{"negative base", Config{Cooldown: CooldownConfig{SlowBody: ClassPolicy{Base: -time.Second}}}, "cooldown.slow_body.base"},
		{"negative after", Config{Cooldown: CooldownConfig{UpstreamError: ClassPolicy{After: -1}}}, "cooldown.upstream_error.after"},
		{"permanent below after", Config{Cooldown: CooldownConfig{AuthRejected: ClassPolicy{After: 3, PermanentAfter: 2}}}, "cooldown.auth_rejected.permanent_after"},
		{"multiplier below 1", Config{Cooldown: CooldownConfig{Multiplier: 0.5}}, "cooldown.multiplier"},
		{"jitter 1", Config{Cooldown: CooldownConfig{Jitter: 1}}, "cooldown.jitter"},
		{"probe scheme", Config{Probe: ProbeConfig{URL: "ftp://x/"}}, "probe.url: scheme"},
		{"probe no host", Config{Probe: ProbeConfig{URL: "http:///health"}}, "probe.url: missing host"},
		{"probe userinfo", Config{Probe: ProbeConfig{URL: "http://u:p@x/"}}, "probe.url: must not carry userinfo"},
		{"probe bad url", Config{Probe: ProbeConfig{URL: "http://[::1"}}, "probe.url"},
		{"expect status", Config{Probe: ProbeConfig{ExpectStatus: []int{200, 99}}}, "probe.expect_status: 99"},
		{"expect status 1xx", Config{Probe: ProbeConfig{ExpectStatus: []int{200, 101}}}, "probe.expect_status: 101 is an interim (1xx) status"},
		{"probe timeout", Config{Probe: ProbeConfig{Timeout: -1}}, "probe.timeout"},
		{"probe concurrency", Config{Probe: ProbeConfig{MaxConcurrent: -1}}, "probe.max_concurrent"},
		{"probe rate", Config{Probe: ProbeConfig{Rate: -1}}, "probe.rate"},
		{"slow start rate", Config{SlowStartRate: -1}, "slow_start_rate"},
		{"history", Config{HistoryLen: -1}, "history_len"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Validate() = %v, want error containing %q", err, tt.want)
			}
		})
	}
}

// FuzzCooldown checks that Cooldown never panics and stays within
// [0, max] for any input, including NaN samples and huge streaks.
func FuzzCooldown(f *testing.F) {
	f.Add(1, 0.5, int64(time.Second), int64(time.Minute), 2.0, 0.2) // defaults shape
	f.Add(math.MaxInt, 1.0, int64(1), int64(math.MaxInt64), 10.0, 0.9)
	f.Add(-1, math.NaN(), int64(0), int64(0), 1.0, 0.0)
	f.Fuzz(func(t *testing.T, n int, s float64, base, hi int64, mult, jitter float64) {
		c := CooldownConfig{Multiplier: mult, Jitter: jitter, Refused: ClassPolicy{Base: time.Duration(base), Max: time.Duration(hi)}}
		if c.Validate() != nil {
			return
		}
		p := c.Policy()
		got := p.Cooldown(Refused, n, s)
		if got < 0 || got > p.For(Refused).Max {
			t.Fatalf("Cooldown(%d, %v) = %v outside [0, %v]", n, s, got, p.For(Refused).Max)
		}
	})
}

// TestValidateReportsEvery: every problem of [cooldown] and [probe] is
// its own *KeyError naming its key (bug: a class table stopped at its
// first problem, and the gateway got one multi-line message).
func TestValidateReportsEvery(t *testing.T) {
	cfg := Config{
		Cooldown: CooldownConfig{
			Multiplier:   0.5,
			Refused:      ClassPolicy{Base: -time.Second, Max: -time.Second},
			AuthRejected: ClassPolicy{Base: time.Hour, Max: time.Minute, After: 3, PermanentAfter: 2},
		},
		Probe: ProbeConfig{URL: "http://u:S3cretPw@[::1", ExpectStatus: []int{700, 800}, Timeout: -1},
	}
	err := cfg.Validate()
	var got []string
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var ke *KeyError
		if !errors.As(e, &ke) {
			t.Errorf("%v is not a *KeyError", e)
			return
		}
		got = append(got, ke.Key)
	}
	walk(err)
	want := []string{"cooldown.multiplier", "cooldown.refused.base", "cooldown.refused.max",
		"cooldown.auth_rejected.max", "cooldown.auth_rejected.permanent_after",
		"probe.url", "probe.expect_status", "probe.expect_status", "probe.timeout"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("keys:\n%v\nwant:\n%v", got, want)
	}
	if err != nil && strings.Contains(err.Error(), "S3cretPw") {
		t.Errorf("the probe url's password is shown: %v", err)
	}
}
