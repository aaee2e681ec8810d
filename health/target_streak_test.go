package health

import (
	"errors"
	"testing"
	"time"
)

// TestPerHostStreaks: a per-host cooldown grows on repeated failures at
// its host until a success that disproves it (clearedBy). Issue: any
// success for the host dropped the expired entry, and the success that
// follows a per-host cooling is the next tunnel's CONNECT, so a tarpit
// (and a site banning the exit, a forwarded 407, squid refusing CONNECT to
// a port it serves GETs on) cooled each upstream at the base cooldown
// every time: one failed tunnel per base cooldown per upstream, forever.
func TestPerHostStreaks(t *testing.T) {
	fail := func(c Class, st Stage, sc Scope, target string) *Failure {
		return &Failure{Class: c, Stage: st, Scope: sc, Target: target, Err: errors.New("x")}
	}
	var (
		tarpit   = silence("tarpit.example:443")
		ban      = fail(TargetHTTPError, StageHTTPStatus, ScopeDefault, "shop.example:443")
		auth407  = fail(AuthRejected, StageProxyAuth, ScopeTarget, "site.example:80")
		sslPort  = fail(UpstreamError, StageProxyHandshake, ScopePort, "squid.example:80") // CONNECT 403
		squidGet = fail(UpstreamError, StageHTTPStatus, ScopeTarget, "plain.example:80")
		gateway  = fail(UpstreamError, StageTargetConnect, ScopeTarget, "gw.example:443") // a 502 to CONNECT
		stall    = fail(SlowBody, StageBody, ScopeTarget, "stall.example:443")
	)
	connect := func(target string) func(*Tracker, *Record) {
		return func(tr *Tracker, r *Record) { tr.SuccessTarget(r, target) }
	}
	bytes := func(target string) func(*Tracker, *Record) {
		return func(tr *Tracker, r *Record) { tr.Answered(r, target) }
	}
	served := func(target string) func(*Tracker, *Record) {
		return func(tr *Tracker, r *Record) { tr.SuccessServed(r, target) }
	}
	nothing := func(*Tracker, *Record) {}
	const m = time.Minute
	cases := []struct {
		name    string
		f       *Failure
		key     string                  // the entry's key
		between func(*Tracker, *Record) // after each cooldown ends
		idle    time.Duration           // more time after it ends
		want    []time.Duration         // the cooldowns, in turn
	}{
		{"tarpit: a CONNECT that went through keeps the streak", tarpit, "tarpit.example", connect("tarpit.example:443"), 0,
			[]time.Duration{m / 2, m, 2 * m, 4 * m, 8 * m, 10 * m, 10 * m}},
		{"tarpit: a byte back restarts it", tarpit, "tarpit.example", bytes("tarpit.example:443"), 0, []time.Duration{m / 2, m / 2}},
		{"tarpit: a byte back from another port of the host", tarpit, "tarpit.example", bytes("tarpit.example:80"), 0, []time.Duration{m / 2, m / 2}},
		{"tarpit: a forwarded answer", tarpit, "tarpit.example", served("tarpit.example:80"), 0, []time.Duration{m / 2, m / 2}},
		{"tarpit: quiet for its max, it starts over", tarpit, "tarpit.example", nothing, 10 * m, []time.Duration{m / 2, m / 2}},
		{"tarpit: quiet for less, it grows", tarpit, "tarpit.example", connect("tarpit.example:443"), 10*m - time.Second, []time.Duration{m / 2, m}},
		{"ban: a tunnel set up is no answer", ban, "shop.example", connect("shop.example:443"), 0, []time.Duration{m, 2 * m, 4 * m}},
		{"ban: a tunnel's bytes may be the ban page", ban, "shop.example", bytes("shop.example:443"), 0, []time.Duration{m, 2 * m}},
		{"ban: a forwarded answer that is no ban restarts it", ban, "shop.example", served("shop.example:80"), 0, []time.Duration{m, m}},
		{"forwarded 407: a CONNECT says nothing of it", auth407, "site.example", connect("site.example:443"), 0, []time.Duration{5 * m, 10 * m}},
		{"forwarded 407: a forwarded answer restarts it", auth407, "site.example", served("site.example:80"), 0, []time.Duration{5 * m, 5 * m}},
		{"CONNECT refused at a port: a forwarded GET to it is no CONNECT", sslPort, "squid.example:80", served("squid.example:80"), 0, []time.Duration{m / 2, m}},
		{"CONNECT refused at a port: another port", sslPort, "squid.example:80", connect("squid.example:443"), 0, []time.Duration{m / 2, m}},
		{"CONNECT refused at a port: a CONNECT there restarts it", sslPort, "squid.example:80", connect("squid.example:80"), 0, []time.Duration{m / 2, m / 2}},
		{"squid's error to a GET: a CONNECT says nothing of it", squidGet, "plain.example", connect("plain.example:443"), 0, []time.Duration{m / 2, m}},
		{"squid's error to a GET: a forwarded answer restarts it", squidGet, "plain.example", served("plain.example:80"), 0, []time.Duration{m / 2, m / 2}},
		{"gateway failure: reaching the host restarts it", gateway, "gw.example", connect("gw.example:443"), 0, []time.Duration{m / 2, m / 2}},
		{"body stall: its CONNECT and first byte prove nothing", stall, "stall.example", func(tr *Tracker, r *Record) {
			tr.SuccessTarget(r, "stall.example:443")
			tr.Answered(r, "stall.example:443")
		}, 0, []time.Duration{m / 2, m}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{StartEligible: true, TargetRuleHosts: -1})
			r := tr.Add("k", "up", nil, false)
			for i, want := range tc.want {
				f := *tc.f
				tr.Fail(r, &f)
				s := tr.Snapshot(r)
				if len(s.Targets) != 1 || s.Targets[0].Host != tc.key {
					t.Fatalf("cooling %d: targets %+v, want one for %s", i+1, s.Targets, tc.key)
				}
				if got := s.Targets[0].Until.Sub(clk.Now()); got != want {
					t.Fatalf("cooling %d for %v, want %v (streak %d)", i+1, got, want, s.Targets[0].Streak)
				}
				if s.State != Eligible {
					t.Fatalf("cooling %d: the record is %v, want eligible", i+1, s.State)
				}
				clk.Advance(want)
				tc.between(tr, r)
				clk.Advance(tc.idle)
			}
		})
	}
}

// TestPerHostAfterKeptAcrossConnect: with after = 2, a CONNECT that went
// through between two silences at a host keeps the first one counted
// (bug: it dropped the entry, and with it the count, so a tarpit never
// cooled the upstream for it at all).
func TestPerHostAfterKeptAcrossConnect(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true, TargetRuleHosts: -1,
		Cooldown: CooldownConfig{SlowBody: ClassPolicy{Base: time.Minute, Max: time.Hour, After: 2}}})
	r := tr.Add("k", "up", nil, false)
	for range 2 {
		tr.SuccessTarget(r, "tarpit.example:443")
		tr.Fail(r, silence("tarpit.example:443"))
	}
	if tr.AdmitTarget(r, "tarpit.example:443") {
		t.Fatal("two silences at the host, a CONNECT before each: not cooling for it")
	}
	// A byte back drops a count below after.
	tr2, _ := newFakeTracker(t, Config{StartEligible: true, TargetRuleHosts: -1,
		Cooldown: CooldownConfig{SlowBody: ClassPolicy{Base: time.Minute, Max: time.Hour, After: 2}}})
	r2 := tr2.Add("k", "up", nil, false)
	tr2.Fail(r2, silence("tarpit.example:443"))
	tr2.Answered(r2, "tarpit.example:443")
	tr2.Fail(r2, silence("tarpit.example:443"))
	if !tr2.AdmitTarget(r2, "tarpit.example:443") {
		t.Fatal("a silence, a byte back, a silence: cooling for the host")
	}
}
