package health

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// silence is a tunnel's first-byte silence at target, as the gateway
// reports it.
func silence(target string) *Failure {
	return &Failure{Class: SlowBody, Stage: StageFirstByte, Scope: ScopeTarget, Target: target,
		Err: errors.New("no byte from the target through this upstream within slow_body.first_byte")}
}

// TestFirstByteSilence: a tunnel's first-byte silence (issue: tarpit
// targets) cools its upstream for that host only, and the upstream whole
// only on evidence that the silence is its own. Before, every silence
// cooled the upstream whole, so any client could take healthy upstreams
// out one after another with a host that accepts and never answers.
func TestFirstByteSilence(t *testing.T) {
	const tarpit = "tarpit.example:443"
	hosts := []string{"a.example:443", "b.example:443", "c.example:443"}
	cases := []struct {
		name string
		cfg  Config
		// run drives the records: bad (whose state is checked), and two
		// others.
		run       func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record)
		wantState State
		wantHosts []string // bad's per-host cooldowns, sorted by end
		wantWhy   string   // in bad's last history detail, when it cooled whole
	}{
		{
			name: "a tarpit silent through every upstream cools each for that host only",
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				for range 5 {
					for _, r := range []*Record{bad, o1, o2} {
						tr.SuccessTarget(r, tarpit) // CONNECT went through
						tr.Fail(r, silence(tarpit))
						adv(time.Second)
					}
				}
			},
			wantState: Eligible, wantHosts: []string{"tarpit.example"},
		},
		{
			name: "one record silent at hosts others answer after: the silence rule cools it",
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				for _, h := range hosts {
					tr.SuccessTarget(bad, h)
					tr.Fail(bad, silence(h))
					adv(time.Second)
					tr.SuccessTarget(o1, h)
					tr.Answered(o1, h)
					adv(time.Second)
				}
			},
			wantState: Cooling, wantHosts: []string{"a.example", "b.example", "c.example"},
			wantWhy: "silent tunnels to 2 hosts that answer through other upstreams",
		},
		{
			// Others' tunnels to the same tarpits went through CONNECT
			// (still waiting for their first byte): no evidence. The
			// target-failure rule, which reads CONNECT successes, cooled
			// bad whole for it.
			name: "a CONNECT that went through elsewhere is no answer",
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				for _, h := range hosts {
					tr.SuccessTarget(bad, h)
					tr.Fail(bad, silence(h))
					adv(time.Second)
					tr.SuccessTarget(o1, h)
					adv(time.Second)
				}
			},
			wantState: Eligible, wantHosts: []string{"a.example", "b.example", "c.example"},
		},
		{
			name: "answers from before the silence are no evidence (the hosts went silent)",
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				for _, h := range hosts {
					tr.Answered(o1, h)
					adv(time.Second)
					tr.Fail(bad, silence(h))
					adv(time.Second)
				}
			},
			wantState: Eligible, wantHosts: []string{"a.example", "b.example", "c.example"},
		},
		{
			name: "hosts also silent through another record (slow for everyone) are no evidence",
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				for _, h := range hosts {
					tr.Fail(bad, silence(h))
					adv(time.Second)
					tr.Fail(o2, silence(h))
					tr.Answered(o1, h)
					adv(time.Second)
				}
			},
			wantState: Eligible, wantHosts: []string{"a.example", "b.example", "c.example"},
		},
		{
			name: "silent again at a host that answered through another since: a slow_body failure of its own",
			cfg:  Config{TargetRuleHosts: -1},
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				tr.Fail(bad, silence(hosts[0]))
				adv(time.Second)
				tr.Answered(o1, hosts[0])
				adv(31 * time.Second) // the host's cooldown is over
				tr.Fail(bad, silence(hosts[0]))
			},
			wantState: Cooling, wantHosts: []string{"a.example"}, // cooled again for the host, and whole
			wantWhy: "silent again at a.example:443, which answers through other upstreams",
		},
		{
			name: "its own answer from the host since forgives its silence there",
			cfg:  Config{TargetRuleHosts: -1},
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				tr.Fail(bad, silence(hosts[0]))
				adv(time.Second)
				tr.Answered(o1, hosts[0])
				tr.Answered(bad, hosts[0])
				adv(31 * time.Second)
				tr.Fail(bad, silence(hosts[0]))
			},
			wantState: Eligible, wantHosts: []string{"a.example"},
		},
		{
			name: "a target without a port is never counted",
			run: func(tr *Tracker, adv func(time.Duration), bad, o1, o2 *Record) {
				for _, h := range []string{"a.example", "b.example", "c.example"} {
					tr.Fail(bad, silence(h))
					adv(time.Second)
					tr.Answered(o1, h)
					adv(time.Second)
				}
			},
			wantState: Eligible, wantHosts: []string{"a.example", "b.example", "c.example"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.StartEligible = true
			tr, clk := newFakeTracker(t, cfg)
			bad := tr.Add("bad", "bad", nil, false)
			o1 := tr.Add("o1", "o1", nil, false)
			o2 := tr.Add("o2", "o2", nil, false)
			tc.run(tr, clk.Advance, bad, o1, o2)
			s := tr.Snapshot(bad)
			if s.State != tc.wantState {
				t.Errorf("bad: %v (%v at %v), want %v", s.State, s.Reason, s.Stage, tc.wantState)
			}
			var got []string
			for _, tc := range s.Targets {
				if tc.Reason != SlowBody || tc.Stage != StageFirstByte {
					t.Errorf("per-host cooldown %+v, want slow_body at first_byte", tc)
				}
				got = append(got, tc.Host)
			}
			if strings.Join(got, ",") != strings.Join(tc.wantHosts, ",") {
				t.Errorf("per-host cooldowns %v, want %v", got, tc.wantHosts)
			}
			if tc.wantState == Cooling {
				if s.Reason != SlowBody || s.Stage != StageFirstByte {
					t.Errorf("bad cools for %v at %v, want slow_body at first_byte", s.Reason, s.Stage)
				}
				if last := s.History[len(s.History)-1]; !strings.Contains(last.Detail, tc.wantWhy) {
					t.Errorf("history detail %q, want it to say %q", last.Detail, tc.wantWhy)
				}
			}
			for _, r := range []*Record{o1, o2} {
				if st := tr.Snapshot(r).State; st != Eligible {
					t.Errorf("%s: %v, want eligible", r.Name(), st)
				}
			}
		})
	}
}
