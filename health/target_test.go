package health

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestTargetFailuresNeverCoolAlone(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, false)
	for i := range 50 {
		tr.Fail(r, &Failure{Class: TargetUnreachable, Stage: StageTargetConnect, Target: fmt.Sprint("h", i)})
		tr.Fail(r, &Failure{Class: TargetTimeout, Stage: StageTargetConnect, Target: fmt.Sprint("h", i)})
	}
	s := tr.Snapshot(r)
	if s.State != Eligible || len(s.History) != 0 {
		t.Fatalf("target failures cooled the upstream: %+v", s)
	}
	if s.Failures[TargetUnreachable] != 50 || s.Failures[TargetTimeout] != 50 || s.Stages[StageTargetConnect] != 100 {
		t.Errorf("counters: %v %v", s.Failures, s.Stages)
	}
}

func TestTargetRule(t *testing.T) {
	tf := func(host string) *Failure {
		return &Failure{Class: TargetUnreachable, Stage: StageTargetConnect, Target: host}
	}
	tests := []struct {
		name string
		run  func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record)
		want State
	}{
		{"two hosts others reach", func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record) {
			tr.SuccessTarget(good, "a.example:443")
			tr.SuccessTarget(good, "b.example:443")
			tr.Fail(bad, tf("a.example:443"))
			tr.Fail(bad, tf("b.example:443"))
		}, Cooling},
		{"success reported after the first failure", func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record) {
			tr.Fail(bad, tf("a.example:443"))
			tr.SuccessTarget(good, "a.example:443")
			tr.SuccessTarget(good, "b.example:443")
			tr.Fail(bad, tf("b.example:443"))
		}, Cooling},
		{"one host only", func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record) {
			tr.SuccessTarget(good, "a.example:443")
			for range 5 {
				tr.Fail(bad, tf("a.example:443"))
			}
		}, Eligible},
		{"nobody else reaches them", func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record) {
			tr.Fail(bad, tf("a.example:443"))
			tr.Fail(bad, tf("b.example:443"))
			tr.Fail(bad, tf("c.example:443"))
		}, Eligible},
		{"only the failing record reached them", func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record) {
			tr.SuccessTarget(bad, "a.example:443")
			tr.SuccessTarget(bad, "b.example:443")
			tr.Fail(bad, tf("a.example:443"))
			tr.Fail(bad, tf("b.example:443"))
		}, Eligible},
		{"outside the window", func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record) {
			tr.SuccessTarget(good, "a.example:443")
			tr.Fail(bad, tf("a.example:443"))
			clk.Advance(61 * time.Second)
			tr.SuccessTarget(good, "b.example:443")
			tr.Fail(bad, tf("b.example:443"))
		}, Eligible},
		{"no target host", func(tr *Tracker, clk interface{ Advance(time.Duration) }, bad, good *Record) {
			tr.SuccessTarget(good, "a.example:443")
			tr.Fail(bad, tf(""))
			tr.Fail(bad, tf(""))
		}, Eligible},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{StartEligible: true})
			bad := tr.Add("bad", "bad", nil, false)
			good := tr.Add("good", "good", nil, false)
			tt.run(tr, clk, bad, good)
			s := tr.Snapshot(bad)
			if s.State != tt.want {
				t.Fatalf("state = %v, want %v", s.State, tt.want)
			}
			if tt.want == Cooling && (s.Reason != UpstreamError || s.Stage != StageTargetConnect) {
				t.Errorf("reason %v stage %v, want upstream_error target_connect", s.Reason, s.Stage)
			}
			if got := tr.Snapshot(good).State; got != Eligible {
				t.Errorf("good record: %v", got)
			}
		})
	}
	t.Run("disabled by config", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true, TargetRuleHosts: -1})
		bad := tr.Add("bad", "bad", nil, false)
		good := tr.Add("good", "good", nil, false)
		for _, h := range []string{"a:1", "b:1", "c:1"} {
			tr.SuccessTarget(good, h)
			tr.Fail(bad, tf(h))
		}
		if got := tr.Snapshot(bad).State; got != Eligible {
			t.Errorf("state = %v", got)
		}
	})
}

func TestTargetScope(t *testing.T) {
	ban := func(host string) *Failure {
		return &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: host}
	}
	t.Run("cools for the host only", func(t *testing.T) {
		tr, clk := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, false)
		tr.Fail(r, ban("shop.example"))
		if !tr.Admit(r) || !tr.Eligible(r) || !tr.AdmitTarget(r, "news.example") || !tr.AdmitTarget(r, "") {
			t.Fatal("a per-target cooldown blocked other hosts")
		}
		if tr.AdmitTarget(r, "shop.example") {
			t.Fatal("admitted the banned host")
		}
		s := tr.Snapshot(r)
		want := TargetCooldown{Host: "shop.example", Reason: TargetHTTPError, Stage: StageHTTPStatus, Until: clk.Now().Add(time.Minute), Streak: 1}
		if len(s.Targets) != 1 || s.Targets[0] != want {
			t.Fatalf("Targets = %+v, want %+v", s.Targets, want)
		}
		if h := s.History[len(s.History)-1]; h.Target != "shop.example" || h.From != Eligible || h.To != Eligible {
			t.Errorf("history entry %+v", h)
		}
		// Repeated reports while cooling do not extend it; after expiry
		// the next ban doubles.
		tr.Fail(r, ban("shop.example"))
		clk.Advance(time.Minute)
		if !tr.AdmitTarget(r, "shop.example") || len(tr.Snapshot(r).Targets) != 0 {
			t.Fatal("per-target cooldown did not expire")
		}
		tr.Fail(r, ban("shop.example"))
		if got := tr.Snapshot(r).Targets[0].Until.Sub(clk.Now()); got != 2*time.Minute {
			t.Errorf("second ban = %v, want 2m", got)
		}
		// A forwarded answer from the host (no ban) after expiry restarts
		// its streak; a tunnel set up to it does not (TestPerHostStreaks).
		clk.Advance(2 * time.Minute)
		tr.SuccessServed(r, "shop.example")
		tr.Fail(r, ban("shop.example"))
		if got := tr.Snapshot(r).Targets[0].Until.Sub(clk.Now()); got != time.Minute {
			t.Errorf("after success = %v, want 1m", got)
		}
	})
	t.Run("scope upstream cools everything", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true, ScopeTargetHTTPError: ScopeUpstream})
		r := tr.Add("k", "up", nil, false)
		tr.Fail(r, ban("shop.example"))
		if tr.Admit(r) || tr.Snapshot(r).State != Cooling {
			t.Error("scope upstream did not cool the record")
		}
	})
	t.Run("slow_body scope target", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true, ScopeSlowBody: ScopeTarget})
		r := tr.Add("k", "up", nil, false)
		tr.Fail(r, &Failure{Class: SlowBody, Stage: StageFirstByte, Target: "slow.example"})
		tr.Fail(r, &Failure{Class: SlowBody, Stage: StageFirstByte}) // no target: whole record
		s := tr.Snapshot(r)
		if len(s.Targets) != 1 || s.State != Cooling {
			t.Errorf("snapshot %+v", s)
		}
	})
	t.Run("bounded, oldest dropped", func(t *testing.T) {
		tr, clk := newFakeTracker(t, Config{StartEligible: true, MaxTargets: 4})
		r := tr.Add("k", "up", nil, false)
		for i := range 6 {
			tr.Fail(r, ban(fmt.Sprint("h", i)))
			clk.Advance(time.Second)
		}
		s := tr.Snapshot(r)
		if len(s.Targets) != 4 || s.TargetDrops != 2 || s.Targets[0].Host != "h2" {
			t.Fatalf("targets %+v drops %d", s.Targets, s.TargetDrops)
		}
		if !tr.AdmitTarget(r, "h0") || tr.AdmitTarget(r, "h5") {
			t.Error("dropped host still cooling, or kept host admitted")
		}
	})
}

// TestPolicyRefusal: a failure scoped to its target (CONNECT 403, SOCKS5
// reply 2) cools the upstream for that host only, even for a class whose
// configured scope is the whole upstream, and refusing hosts that other
// upstreams reach cools it entirely.
func TestPolicyRefusal(t *testing.T) {
	refuse := func(host string) *Failure {
		return &Failure{Class: UpstreamError, Stage: StageProxyHandshake, Target: host, Scope: ScopeTarget}
	}
	t.Run("one host", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, false)
		for range 5 {
			tr.Fail(r, refuse("plain.example"))
		}
		s := tr.Snapshot(r)
		if s.State != Eligible || !tr.AdmitTarget(r, "other.example") {
			t.Fatalf("a policy refusal of one host cooled the upstream: %v", s.State)
		}
		if tr.AdmitTarget(r, "plain.example") {
			t.Fatal("the refused host is still admitted")
		}
		if len(s.Targets) != 1 || s.Targets[0].Reason != UpstreamError || s.Targets[0].Stage != StageProxyHandshake {
			t.Fatalf("Targets = %+v", s.Targets)
		}
		if s.Failures[UpstreamError] != 5 {
			t.Errorf("failures counted %v, want 5 upstream_error", s.Failures)
		}
	})
	t.Run("hosts others reach", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		bad := tr.Add("bad", "bad", nil, false)
		good := tr.Add("good", "good", nil, false)
		for _, h := range []string{"a.example:443", "b.example:443"} {
			tr.SuccessTarget(good, h)
			tr.Fail(bad, refuse(h))
		}
		if s := tr.Snapshot(bad); s.State != Cooling || s.Reason != UpstreamError || s.Stage != StageTargetConnect {
			t.Fatalf("an upstream refusing hosts others reach: %v %v/%v, want cooling upstream_error/target_connect", s.State, s.Reason, s.Stage)
		}
	})
	t.Run("without a target it is the upstream's", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, false)
		tr.Fail(r, refuse(""))
		if s := tr.Snapshot(r); s.State != Cooling {
			t.Fatalf("state %v, want cooling", s.State)
		}
	})
}

// TestTargetSeenSkipsKeepRule: successes that leave the "who reached this
// host" table as is (the same record again, or a third one while two are
// recent) never hide a host from the target-failure rule: a success by
// another record at least seenFresh after a failure is always seen, and
// never after the failure left the window or the host was dropped from
// the table.
func TestTargetSeenSkipsKeepRule(t *testing.T) {
	const win = 60 * time.Second
	fresh := win / seenFreshDiv
	tf := func(host string) *Failure {
		return &Failure{Class: TargetUnreachable, Stage: StageTargetConnect, Target: host}
	}
	type recs struct{ bad, good, third *Record }
	// goodReaches has good reach a and b n times, fresh/4 apart.
	goodReaches := func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs, n int) {
		for range n {
			tr.SuccessTarget(r.good, "a.example:443")
			tr.SuccessTarget(r.good, "b.example:443")
			clk.Advance(fresh / 4)
		}
	}
	// badFails has bad fail to reach a and b: the rule's two hosts.
	badFails := func(tr *Tracker, r recs) {
		tr.Fail(r.bad, tf("a.example:443"))
		tr.Fail(r.bad, tf("b.example:443"))
	}
	// weigh has bad fail a third host: the rule is weighed at a failure.
	weigh := func(tr *Tracker, r recs) { tr.Fail(r.bad, tf("c.example:443")) }
	tests := []struct {
		name string
		run  func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs)
		want State
	}{
		{"repeated successes keep refreshing", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			// Three minutes of successes every fresh/4: most are skipped,
			// yet the table must not stay at the first one, nor at one
			// from before the failures.
			goodReaches(tr, clk, r, int(3*time.Minute/(fresh/4)))
			badFails(tr, r)
			goodReaches(tr, clk, r, 8)
			weigh(tr, r)
		}, Cooling},
		{"a success right after the failures", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			// good's entry is fresh when bad fails: its next success,
			// less than fresh later, must be noted all the same.
			goodReaches(tr, clk, r, 8)
			badFails(tr, r)
			goodReaches(tr, clk, r, 1)
			weigh(tr, r)
		}, Cooling},
		{"just inside the window", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			badFails(tr, r)
			clk.Advance(time.Second)
			goodReaches(tr, clk, r, 1)
			clk.Advance(win - time.Second - fresh/4 - time.Nanosecond) // failures + win - 1ns
			weigh(tr, r)
		}, Cooling},
		{"the failures left the window", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			badFails(tr, r)
			clk.Advance(time.Second)
			goodReaches(tr, clk, r, 1)
			clk.Advance(win - time.Second - fresh/4) // failures + win
			weigh(tr, r)
		}, Eligible},
		{"a third record while two are recent", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			// bad and third fill a's pair, recently, before bad fails it:
			// good's success right after must still enter the pair.
			tr.SuccessTarget(r.bad, "a.example:443")
			tr.SuccessTarget(r.third, "a.example:443")
			clk.Advance(fresh / 4)
			badFails(tr, r)
			tr.SuccessTarget(r.good, "a.example:443")
			tr.SuccessTarget(r.good, "b.example:443")
			weigh(tr, r)
		}, Cooling},
		{"two recent others, no failure since", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			// Without a failure after them, good's success is skipped
			// (they answer for it); bad's failures then need a success
			// after them.
			tr.SuccessTarget(r.third, "a.example:443")
			tr.SuccessTarget(r.bad, "a.example:443")
			tr.SuccessTarget(r.good, "a.example:443")
			clk.Advance(fresh / 4)
			badFails(tr, r)
			weigh(tr, r)
		}, Eligible},
		{"the failing record's own successes do not count", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			goodReaches(tr, clk, r, 1)
			badFails(tr, r)
			for range 10 {
				clk.Advance(fresh)
				tr.SuccessTarget(r.bad, "a.example:443")
				tr.SuccessTarget(r.bad, "b.example:443")
			}
			weigh(tr, r)
		}, Eligible},
		{"a dropped host comes back at the next success", func(tr *Tracker, clk interface{ Advance(time.Duration) }, r recs) {
			badFails(tr, r)
			tr.SuccessTarget(r.good, "a.example:443")
			for i := range seenMax {
				tr.SuccessTarget(r.third, fmt.Sprint("h", i, ".example:443")) // drops a.example
			}
			tr.SuccessTarget(r.good, "a.example:443") // within fresh of the first: must not be skipped
			tr.SuccessTarget(r.good, "b.example:443")
			weigh(tr, r)
		}, Cooling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, Config{StartEligible: true, TargetRuleWindow: win})
			r := recs{tr.Add("bad", "bad", nil, false), tr.Add("good", "good", nil, false), tr.Add("third", "third", nil, false)}
			tt.run(tr, clk, r)
			if got := tr.Snapshot(r.bad).State; got != tt.want {
				t.Fatalf("state = %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("dropped host is forgotten", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true, TargetRuleWindow: win})
		good, other := tr.Add("good", "good", nil, false), tr.Add("other", "other", nil, false)
		since := tr.clock.Now()
		tr.SuccessTarget(good, "a.example:443")
		for i := range seenMax {
			tr.SuccessTarget(other, fmt.Sprint("h", i, ".example:443"))
		}
		if tr.seen.reachedByOther("a.example:443", other, since) {
			t.Error("a.example still remembered beyond seenMax hosts")
		}
		if !tr.seen.reachedByOther(fmt.Sprint("h", seenMax-1, ".example:443"), good, since) {
			t.Error("the newest host was dropped")
		}
	})
}

// TestTargetRulePort: "other upstreams reach it" means the same host:port
// (issue: two requests to closed ports of hosts others reach at another
// port cooled a healthy upstream entirely).
func TestTargetRulePort(t *testing.T) {
	refused := func(target string) *Failure {
		return &Failure{Class: TargetUnreachable, Stage: StageTargetConnect, Target: target}
	}
	tests := []struct {
		name string
		run  func(tr *Tracker, bad, good *Record)
		want State
	}{
		{"closed ports of hosts others reach at another port", func(tr *Tracker, bad, good *Record) {
			tr.SuccessTarget(good, "127.0.0.1:27080")
			tr.SuccessTarget(good, "localhost:27080")
			tr.Fail(bad, refused("127.0.0.1:27098"))
			tr.Fail(bad, refused("localhost:27098"))
		}, Eligible},
		{"the very host:ports others reach", func(tr *Tracker, bad, good *Record) {
			tr.SuccessTarget(good, "127.0.0.1:27080")
			tr.SuccessTarget(good, "localhost:27080")
			tr.Fail(bad, refused("127.0.0.1:27080"))
			tr.Fail(bad, refused("localhost:27080"))
		}, Cooling},
		{"two ports of one host count once", func(tr *Tracker, bad, good *Record) {
			tr.SuccessTarget(good, "shop.example:80")
			tr.SuccessTarget(good, "shop.example:443")
			tr.Fail(bad, refused("shop.example:80"))
			tr.Fail(bad, refused("shop.example:443"))
		}, Eligible},
		{"targets named without a port never count", func(tr *Tracker, bad, good *Record) {
			tr.SuccessTarget(good, "a.example")
			tr.SuccessTarget(good, "b.example")
			tr.Fail(bad, refused("a.example"))
			tr.Fail(bad, refused("b.example"))
		}, Eligible},
		{"IPv6 literals", func(tr *Tracker, bad, good *Record) {
			tr.SuccessTarget(good, "[2001:db8::1]:443")
			tr.SuccessTarget(good, "[2001:db8::2]:443")
			tr.Fail(bad, refused("[2001:db8::1]:443"))
			tr.Fail(bad, refused("[2001:db8::2]:443"))
		}, Cooling},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, _ := newFakeTracker(t, Config{StartEligible: true})
			bad := tr.Add("bad", "bad", nil, false)
			good := tr.Add("good", "good", nil, false)
			tt.run(tr, bad, good)
			s := tr.Snapshot(bad)
			if s.State != tt.want {
				t.Fatalf("state = %v, want %v (history %+v)", s.State, tt.want, s.History)
			}
			if tt.want == Cooling && (s.Reason != UpstreamError || s.Stage != StageTargetConnect) {
				t.Errorf("reason %v stage %v, want upstream_error target_connect", s.Reason, s.Stage)
			}
		})
	}
}

// TestTargetScopePerHost: a scoped failure or success named host:port
// acts on the host's cooldown (the contract lists hosts without port).
func TestTargetScopePerHost(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, false)
	tr.Fail(r, &Failure{Class: UpstreamError, Stage: StageProxyHandshake, Target: "shop.example:80", Scope: ScopeTarget})
	s := tr.Snapshot(r)
	if len(s.Targets) != 1 || s.Targets[0].Host != "shop.example" {
		t.Fatalf("Targets = %+v, want one for shop.example", s.Targets)
	}
	if h := s.History[len(s.History)-1]; h.Target != "shop.example" {
		t.Errorf("history target %q, want shop.example", h.Target)
	}
	for _, target := range []string{"shop.example", "shop.example:443"} {
		if tr.AdmitTarget(r, target) {
			t.Errorf("AdmitTarget(%q) while the host cools", target)
		}
	}
	if !tr.AdmitTarget(r, "[2001:db8::1]:443") || !tr.AdmitTarget(r, "other.example:80") {
		t.Error("other hosts refused")
	}
	clk.Advance(time.Minute)
	tr.SuccessTarget(r, "shop.example:443")
	if n := len(tr.Snapshot(r).Targets); n != 0 {
		t.Errorf("a success for shop.example:443 after expiry kept %d entries", n)
	}
}

func TestSucceededWithin(t *testing.T) {
	tr, clk := newFakeTracker(t, Config{StartEligible: true})
	r := tr.Add("k", "up", nil, false)
	if tr.SucceededWithin(r, time.Minute) {
		t.Fatal("a record that never served succeeded lately")
	}
	tr.SuccessTarget(r, "a.example:443")
	clk.Advance(59 * time.Second)
	if !tr.SucceededWithin(r, time.Minute) {
		t.Fatal("a success 59s ago is not within a minute")
	}
	clk.Advance(time.Second)
	if tr.SucceededWithin(r, time.Minute) {
		t.Fatal("a success a minute ago is within a minute")
	}

	// A passing probe proves the upstream alive too; a failing one does not.
	p, _ := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	up := &pipeUpstream{}
	up.status.Store(502)
	r = p.Add("p", "up", up, false)
	drive(t, p)
	if p.SucceededWithin(r, time.Minute) {
		t.Fatal("a failed probe counts as proof of life")
	}
	p.Enable(r)
	up.status.Store(200)
	drive(t, p)
	if st := p.Snapshot(r).State; st != Eligible || !p.SucceededWithin(r, time.Minute) {
		t.Fatalf("after a passing probe: %v, succeeded within a minute = false", st)
	}
}

func TestTargetHost(t *testing.T) {
	for in, want := range map[string]string{
		"example.com:443":   "example.com",
		"example.com":       "example.com",
		"[2001:db8::1]:443": "2001:db8::1",
		"2001:db8::1":       "2001:db8::1",
		"::1":               "::1",
		"[::1]":             "[::1]",
		"127.0.0.1:80":      "127.0.0.1",
		"":                  "",
	} {
		if got := targetHost(in); got != want {
			t.Errorf("targetHost(%q) = %q, want %q", in, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { targetHost("example.com") }); n != 0 {
		t.Errorf("targetHost allocates %v times", n)
	}
}

// TestPolicyRefusalPerPort: a policy refusal of one port (ScopePort:
// CONNECT 403, squid ERR_ACCESS_DENIED, SOCKS5 reply 2) cools the upstream
// for that host:port only. Issue: stock squid (http_access deny CONNECT
// !SSL_ports) refused CONNECT to :46101, and :46103 of the same host,
// which it allows, then got 503 unavailable for up to 10 minutes. A ban
// (target_http_error) and a refusal of the host (ScopeTarget) stay per
// host.
func TestPolicyRefusalPerPort(t *testing.T) {
	refuse := func(target string) *Failure {
		return &Failure{Class: UpstreamError, Stage: StageProxyHandshake, Target: target, Scope: ScopePort}
	}
	t.Run("other ports of the host", func(t *testing.T) {
		tr, clk := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, false)
		tr.Fail(r, refuse("127.0.0.1:46101"))
		tr.Fail(r, refuse("[2001:db8::1]:80"))
		for _, target := range []string{"127.0.0.1:46103", "127.0.0.1:443", "[2001:db8::1]:443", "other.example:46101"} {
			if !tr.AdmitTarget(r, target) || tr.TargetCooling(r, target) {
				t.Errorf("%s refused: a refusal of another port of the host cooled it", target)
			}
		}
		for _, target := range []string{"127.0.0.1:46101", "[2001:db8::1]:80"} {
			if tr.AdmitTarget(r, target) || !tr.TargetCooling(r, target) {
				t.Errorf("%s admitted while its refusal cools", target)
			}
		}
		s := tr.Snapshot(r)
		if s.State != Eligible {
			t.Fatalf("state %v, want eligible", s.State)
		}
		var hosts []string
		for _, tc := range s.Targets {
			hosts = append(hosts, tc.Host)
		}
		if len(hosts) != 2 || !slices.Contains(hosts, "127.0.0.1:46101") || !slices.Contains(hosts, "[2001:db8::1]:80") {
			t.Errorf("Targets %q, want 127.0.0.1:46101 and [2001:db8::1]:80", hosts)
		}
		if h := s.History[0].Target; h != "127.0.0.1:46101" {
			t.Errorf("history target %q, want 127.0.0.1:46101", h)
		}
		clk.Advance(time.Hour)
		tr.SuccessTarget(r, "127.0.0.1:46101")
		r.mu.Lock()
		_, kept := r.targets["127.0.0.1:46101"]
		n := len(r.targets)
		r.mu.Unlock()
		if kept || n != 1 {
			t.Errorf("after expiry and a success for 127.0.0.1:46101: %d entries (its own kept: %v), want only [2001:db8::1]:80's", n, kept)
		}
	})
	t.Run("a ban stays per host", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, false)
		tr.Fail(r, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "shop.example:80"})
		tr.Fail(r, &Failure{Class: UpstreamError, Stage: StageTargetConnect, Target: "gone.example:80", Scope: ScopeTarget})
		for _, target := range []string{"shop.example:443", "gone.example:443"} {
			if tr.AdmitTarget(r, target) {
				t.Errorf("%s admitted: a ban or refusal of the host is per host", target)
			}
		}
	})
	t.Run("ports of hosts others reach", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		bad := tr.Add("bad", "bad", nil, false)
		good := tr.Add("good", "good", nil, false)
		for _, h := range []string{"a.example:80", "b.example:80"} {
			tr.SuccessTarget(good, h)
			tr.Fail(bad, refuse(h))
		}
		if s := tr.Snapshot(bad); s.State != Cooling || s.Reason != UpstreamError || s.Stage != StageTargetConnect {
			t.Fatalf("an upstream refusing ports others reach: %v %v/%v, want cooling upstream_error/target_connect", s.State, s.Reason, s.Stage)
		}
	})
}
