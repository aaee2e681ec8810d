package health

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// reloadCfg is syncCfg with StartEligible, as a reloaded file would set it.
func reloadCfg(mod func(*Config)) Config {
	c := syncCfg()
	c.StartEligible = true
	if mod != nil {
		mod(&c)
	}
	return c
}

func TestSetConfigNewFailuresUseNewPolicy(t *testing.T) {
	refused := func(tr *Tracker, r *Record) {
		tr.Fail(r, &Failure{Class: Refused, Stage: StageDial, Err: errors.New("refused")})
	}
	tests := []struct {
		name string
		// before is applied to the tracker before the reload (streak set-up).
		before func(t *testing.T, tr *Tracker, r *Record, up *pipeUpstream)
		mod    func(*Config)
		fail   func(tr *Tracker, r *Record)
		want   []time.Duration // cooldowns of successive coolings through failing probes
	}{
		{
			name: "new base",
			mod:  func(c *Config) { c.Cooldown.Refused = ClassPolicy{Base: 2 * time.Second, Max: time.Minute} },
			fail: refused,
			want: []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second},
		},
		{
			name: "new max caps the growth",
			mod:  func(c *Config) { c.Cooldown.Refused = ClassPolicy{Base: 10 * time.Second, Max: 15 * time.Second} },
			fail: refused,
			want: []time.Duration{10 * time.Second, 15 * time.Second, 15 * time.Second},
		},
		{
			name: "new multiplier",
			mod: func(c *Config) {
				c.Cooldown.Multiplier = 3
				c.Cooldown.Refused = ClassPolicy{Base: time.Second, Max: time.Hour}
			},
			fail: refused,
			want: []time.Duration{time.Second, 3 * time.Second, 9 * time.Second},
		},
		{
			name: "streak carries over",
			before: func(t *testing.T, tr *Tracker, r *Record, up *pipeUpstream) {
				refused(tr, r) // 30s under the default policy
				tr.clock.(interface{ Advance(time.Duration) }).Advance(30 * time.Second)
				drive(t, tr) // probe fails: streak 2, cooling 1m
			},
			mod:  func(c *Config) { c.Cooldown.Refused = ClassPolicy{Base: time.Second, Max: time.Hour} },
			want: []time.Duration{4 * time.Second, 8 * time.Second}, // streaks 3 and 4, after the 1m running
		},
		{
			name: "new scope cools the target only",
			mod:  func(c *Config) { c.ScopeSlowBody = ScopeTarget },
			fail: func(tr *Tracker, r *Record) {
				tr.Fail(r, &Failure{Class: SlowBody, Stage: StageBody, Target: "slow.example"})
			},
			want: nil, // the record stays eligible
		},
		{
			name: "permanent_after",
			mod: func(c *Config) {
				c.Cooldown.Refused = ClassPolicy{Base: time.Second, Max: time.Minute, PermanentAfter: 2}
			},
			fail: refused,
			want: []time.Duration{time.Second, 0}, // 0: disabled
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, clk := newFakeTracker(t, reloadCfg(nil))
			up := &pipeUpstream{}
			up.mode.Store(pipeRefuse) // probes fail as refused
			r := tr.Add("k", "up", up, false)
			if tt.before != nil {
				tt.before(t, tr, r, up)
			}
			if err := tr.SetConfig(reloadCfg(tt.mod)); err != nil {
				t.Fatal(err)
			}
			if tt.before != nil {
				// The cooldown running across the reload ends; its probe
				// fails under the new policy.
				clk.Advance(tr.Snapshot(r).Until.Sub(clk.Now()))
				drive(t, tr)
			}
			if tt.fail != nil {
				tt.fail(tr, r)
			}
			if tt.want == nil {
				s := tr.Snapshot(r)
				if s.State != Eligible || len(s.Targets) != 1 || s.Targets[0].Host != "slow.example" {
					t.Errorf("state %v targets %+v, want eligible with one target cooldown", s.State, s.Targets)
				}
				return
			}
			for i, want := range tt.want {
				s := tr.Snapshot(r)
				if want == 0 {
					if s.State != Disabled {
						t.Fatalf("cooling %d: state %v, want disabled", i+1, s.State)
					}
					break
				}
				if got := s.Until.Sub(clk.Now()); s.State != Cooling || got != want {
					t.Fatalf("cooling %d: state %v, cooldown %v, want %v", i+1, s.State, got, want)
				}
				clk.Advance(want)
				drive(t, tr) // the probe fails: next cooling
			}
		})
	}
}

func TestSetConfigKeepsRunningCooldowns(t *testing.T) {
	tr, clk := newFakeTracker(t, reloadCfg(nil))
	up := &pipeUpstream{}
	r := tr.Add("k", "up", up, false)
	start := clk.Now()
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})                                        // 30s
	other := tr.Add("k2", "up2", &pipeUpstream{}, false)                                          // eligible
	tr.Fail(other, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "a.example"}) // 60s for a.example
	before, beforeOther := tr.Snapshot(r), tr.Snapshot(other)

	if err := tr.SetConfig(reloadCfg(func(c *Config) {
		c.Cooldown.Refused = ClassPolicy{Base: time.Second, Max: time.Second}
		c.Cooldown.TargetHTTPError = ClassPolicy{Base: time.Hour, Max: time.Hour}
	})); err != nil {
		t.Fatal(err)
	}
	if s := tr.Snapshot(r); !s.Until.Equal(before.Until) || s.State != Cooling {
		t.Fatalf("reload changed a running cooldown: until %v → %v (%v)", before.Until, s.Until, s.State)
	}
	if s := tr.Snapshot(other); len(s.Targets) != 1 || !s.Targets[0].Until.Equal(beforeOther.Targets[0].Until) {
		t.Fatalf("reload changed a per-target cooldown: %+v → %+v", beforeOther.Targets, s.Targets)
	}
	// The new 1s base does not end the 30s cooldown early...
	clk.Advance(time.Second)
	drive(t, tr)
	if tr.Eligible(r) || up.requests.Load() != 0 {
		t.Fatal("record re-admitted or probed before its recorded deadline")
	}
	// ...nor does the new 1h base extend the 60s per-target one.
	clk.Advance(59 * time.Second)
	drive(t, tr)
	if !tr.AdmitTarget(other, "a.example") {
		t.Error("per-target cooldown outlived its recorded 60s")
	}
	if got := tr.Snapshot(r); got.State != Eligible || up.requests.Load() != 1 {
		t.Errorf("at the recorded deadline (%v): state %v, %d probes", clk.Now().Sub(start), got.State, up.requests.Load())
	}
}

func TestSetConfigInvalidKeepsOld(t *testing.T) {
	tr, clk := newFakeTracker(t, reloadCfg(nil))
	r := tr.Add("k", "up", &pipeUpstream{}, false)
	old := tr.Policy()
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"max below base", func(c *Config) { c.Cooldown.Refused = ClassPolicy{Base: time.Hour, Max: time.Second} }, "cooldown.refused.max"},
		{"multiplier", func(c *Config) {
			c.Cooldown.Multiplier = 0.5
			c.Cooldown.Refused.Base = time.Second
		}, "cooldown.multiplier"},
		{"probe url", func(c *Config) { c.Probe.URL = "ftp://probe.test/" }, "probe.url"},
		{"probe rate", func(c *Config) { c.Probe.Rate = -1 }, "probe.rate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tr.SetConfig(reloadCfg(tt.mod))
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("SetConfig = %v, want an error naming %s", err, tt.wantErr)
			}
			if tr.Policy() != old {
				t.Error("invalid config changed the policy")
			}
			if s := tr.settings(); s.probe == nil || s.probe.addr != "probe.test:80" || s.cfg.Probe.Rate != DefaultProbeRate {
				t.Errorf("invalid config changed the probe settings: %+v", s.cfg.Probe)
			}
		})
	}
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
	if got := tr.Snapshot(r).Until.Sub(clk.Now()); got != 30*time.Second {
		t.Errorf("cooldown after rejected reloads = %v, want the old 30s", got)
	}
}

func TestSetConfigStartEligibleOnlyNewRecords(t *testing.T) {
	tr, _ := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	old := tr.Add("old", "old", &pipeUpstream{}, false)
	if err := tr.SetConfig(reloadCfg(nil)); err != nil { // StartEligible: true
		t.Fatal(err)
	}
	if got := tr.Snapshot(old).State; got != ProbeAllowed {
		t.Errorf("existing record: %v, want probe_allowed (unchanged)", got)
	}
	if got := tr.Snapshot(tr.Add("new", "new", &pipeUpstream{}, false)).State; got != Eligible {
		t.Errorf("record added after the reload: %v, want eligible", got)
	}
}

func TestSetConfigLogs(t *testing.T) {
	var buf bytes.Buffer
	tr := NewTracker(reloadCfg(nil), nil, zerolog.New(&buf))
	if err := tr.SetConfig(reloadCfg(func(c *Config) { c.SlowStart = time.Minute })); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, `"level":"info"`) || !strings.Contains(out, `"message":"health config updated"`) {
		t.Errorf("log: %s", out)
	}
	buf.Reset()
	if err := tr.SetConfig(Config{HistoryLen: -1}); err == nil {
		t.Fatal("invalid config accepted")
	}
	if buf.Len() != 0 {
		t.Errorf("rejected config logged by health (the caller reports it): %s", buf.String())
	}
}

// probeSeen records where each probe went: the address the upstream was
// asked for and the request's Host and target.
type probeSeen struct {
	mu   sync.Mutex
	seen []string
}

func (p *probeSeen) dialer(up *pipeUpstream) Dialer {
	var addr string
	up.onRequest = func(req *http.Request) {
		p.mu.Lock()
		p.seen = append(p.seen, addr+" "+req.Host+req.URL.RequestURI())
		p.mu.Unlock()
	}
	return funcDialer(func(ctx context.Context, network, a string) (net.Conn, error) {
		p.mu.Lock()
		addr = a
		p.mu.Unlock()
		return up.DialContext(ctx, network, a)
	})
}

func (p *probeSeen) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.seen...)
}

func TestSetConfigNextProbeUsesNewURL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(syncCfg(), nil, zerolog.Nop())
		up := &pipeUpstream{}
		var seen probeSeen
		r := tr.Add("k", "up", seen.dialer(up), false)
		startRun(t, tr)
		synctest.Wait()
		if !tr.Eligible(r) {
			t.Fatalf("first probe: %v", tr.Snapshot(r).State)
		}
		tr.Fail(r, &Failure{Class: Refused, Stage: StageDial}) // 30s
		if err := tr.SetConfig(func() Config {
			c := syncCfg()
			c.Probe.URL = "http://new-probe.test:8080/ok?v=2"
			return c
		}()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Second)
		synctest.Wait()
		want := []string{"probe.test:80 probe.test/health", "new-probe.test:8080 new-probe.test:8080/ok?v=2"}
		if got := seen.list(); strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("probes went to %q, want %q", got, want)
		}
		if !tr.Eligible(r) {
			t.Errorf("after the probe to the new URL: %v", tr.Snapshot(r).State)
		}
	})
}

func TestSetConfigProbeRateAppliesPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.Probe.Rate = 0.01 // one start per 100s
		tr := NewTracker(cfg, nil, zerolog.Nop())
		ups := []*pipeUpstream{{}, {}, {}}
		for i, up := range ups {
			tr.Add(string(rune('a'+i)), string(rune('a'+i)), up, false)
		}
		startRun(t, tr)
		synctest.Wait()
		probes := func() (n int64) {
			for _, up := range ups {
				n += up.requests.Load()
			}
			return n
		}
		if got := probes(); got != 1 {
			t.Fatalf("%d probes at start, want 1 (rate 0.01)", got)
		}
		time.Sleep(time.Second)
		cfg.Probe.Rate = 10
		if err := tr.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		// Spaced from the last start under the new rate (100ms), not
		// after the old 100s: the first is due at once, the next 100ms on.
		synctest.Wait()
		if got := probes(); got != 2 {
			t.Fatalf("%d probes right after raising the rate, want 2", got)
		}
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got := probes(); got != 3 {
			t.Errorf("%d probes 100ms later, want 3", got)
		}
	})
}

func TestSetConfigProbeConcurrencyKeepsInflight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.Probe.Rate = 1000
		cfg.Probe.MaxConcurrent = 2
		tr := NewTracker(cfg, nil, zerolog.Nop())
		global := &inflightCounter{}
		const n = 12
		ups := make([]*pipeUpstream, n)
		for i := range n {
			ups[i] = &pipeUpstream{global: global, delay: 4 * time.Second}
			tr.Add(string(rune('a'+i)), "up", ups[i], false)
		}
		t.Cleanup(func() { // after Run stops: let slow fakes finish, even on failure
			for _, up := range ups {
				up.wg.Wait()
			}
		})
		startRun(t, tr)
		time.Sleep(100 * time.Millisecond)
		if got := global.n.Load(); got != 2 {
			t.Fatalf("%d probes in flight, want 2", got)
		}
		// Raised: three more start, not five (the two running count).
		cfg.Probe.MaxConcurrent = 5
		if err := tr.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if got := global.n.Load(); got != 5 {
			t.Fatalf("%d probes in flight after raising the limit to 5", got)
		}
		// Lowered: the five finish; then one at a time.
		cfg.Probe.MaxConcurrent = 1
		if err := tr.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		global.max.Store(0)
		time.Sleep(4 * time.Second)
		synctest.Wait()
		if got := global.n.Load(); got != 1 {
			t.Errorf("%d probes in flight after the lowered limit, want 1", got)
		}
		time.Sleep(time.Minute)
		if got := tr.Counts()[Eligible]; got != n {
			t.Errorf("%d eligible, want %d", got, n)
		}
		if got := global.max.Load(); got > 5 {
			t.Errorf("max in flight %d", got)
		}
	})
}

func TestSetConfigProbeURLRemoved(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.Probe.Rate = 0.001 // the second record waits 1000s for its probe
		tr := NewTracker(cfg, nil, zerolog.Nop())
		a := tr.Add("a", "a", &pipeUpstream{}, false)
		b := tr.Add("b", "b", &pipeUpstream{}, false)
		startRun(t, tr)
		synctest.Wait()
		if !tr.Eligible(a) || tr.Eligible(b) {
			t.Fatalf("states %v %v, want eligible and probe_allowed", tr.Snapshot(a).State, tr.Snapshot(b).State)
		}
		cfg.Probe.URL = ""
		if err := tr.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if s := tr.Snapshot(b); s.State != Eligible || s.ProbesOK != 0 {
			t.Errorf("queued record after the probe url was removed: %v, %d probes", s.State, s.ProbesOK)
		}
	})
}

// TestSetConfigConcurrent reloads while reporting, for the race detector.
func TestSetConfigConcurrent(t *testing.T) {
	tr, _ := newFakeTracker(t, reloadCfg(nil))
	r := tr.Add("k", "up", &pipeUpstream{}, false)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				tr.Admit(r)
				tr.AdmitTarget(r, "a.example")
				tr.Success(r)
				tr.Fail(r, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "a.example"})
				tr.Snapshot(r)
				tr.Enable(r)
			}
		})
	}
	for i := range 200 {
		if err := tr.SetConfig(reloadCfg(func(c *Config) {
			c.SlowStart = time.Duration(i%3) * time.Second
			c.MaxTargets = i%4 + 1
			c.Cooldown.Jitter = -1
		})); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

func TestSetConfigLowerMaxTargets(t *testing.T) {
	tr, clk := newFakeTracker(t, reloadCfg(func(c *Config) { c.MaxTargets = 8 }))
	r := tr.Add("k", "up", &pipeUpstream{}, false)
	ban := func(host string) {
		tr.Fail(r, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: host})
		clk.Advance(time.Second) // distinct ages
	}
	for _, h := range []string{"a", "b", "c", "d"} {
		ban(h + ".example")
	}
	if err := tr.SetConfig(reloadCfg(func(c *Config) { c.MaxTargets = 2 })); err != nil {
		t.Fatal(err)
	}
	if got := len(tr.Snapshot(r).Targets); got != 4 {
		t.Fatalf("%d target cooldowns right after the reload, want the 4 kept", got)
	}
	ban("e.example") // makes room under the new bound: the three oldest go
	s := tr.Snapshot(r)
	var hosts []string
	for _, tc := range s.Targets {
		hosts = append(hosts, tc.Host)
	}
	if strings.Join(hosts, ",") != "d.example,e.example" || s.TargetDrops != 3 {
		t.Errorf("targets %v, drops %d; want d.example,e.example and 3 drops", hosts, s.TargetDrops)
	}
}
