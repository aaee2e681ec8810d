package health

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rs/zerolog"
)

// TestRestoreCooldownEndedAway: an upstream cooling when rotor stopped (or
// when it left the config) whose deadline passed before it was restored
// comes back probe_allowed, and its history says the cooldown ended while
// rotor was stopped (or while out of the config), at the saved deadline,
// with a "record restored" line. Bug: "eligible → cooling" was followed
// by "probe_allowed → cooling" with nothing in between, and no line said
// the record was restored.
func TestRestoreCooldownEndedAway(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		restore    func(t *testing.T, a *Tracker, clk *healthtest.Clock, logs *bytes.Buffer) *Tracker
	}{
		{"state file", "cooldown ended while rotor was stopped", func(t *testing.T, a *Tracker, clk *healthtest.Clock, logs *bytes.Buffer) *Tracker {
			saved := a.Export()[0]
			clk.Advance(time.Hour)
			b := NewTracker(Config{Probe: ProbeConfig{URL: testProbeURL}}, clk, zerolog.New(logs))
			b.Add("k", "up", nil, false)
			if !b.Restore("k", saved) {
				t.Fatal("Restore = false")
			}
			return b
		}},
		{"back in the config", "cooldown ended while out of the config", func(t *testing.T, a *Tracker, clk *healthtest.Clock, logs *bytes.Buffer) *Tracker {
			a.Remove("k")
			clk.Advance(5 * time.Minute) // kept for 15
			a.log = zerolog.New(logs)
			a.Add("k", "up", nil, false)
			return a
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}, StartEligible: true})
			r := a.Add("k", "up", nil, false)
			a.Fail(r, &Failure{Class: Refused, Stage: StageDial})
			until := a.Snapshot(r).Until
			var logs bytes.Buffer
			b := tc.restore(t, a, clk, &logs)
			got := b.Snapshot(b.Lookup("k"))
			if got.State != ProbeAllowed {
				t.Fatalf("state %v, want probe_allowed", got.State)
			}
			h := got.History
			if len(h) < 2 {
				t.Fatalf("history %+v, want the cooling and its end", h)
			}
			last := h[len(h)-1]
			if last.From != Cooling || last.To != ProbeAllowed || last.Detail != tc.want || !last.At.Equal(until) ||
				last.Reason != Refused || last.Stage != StageDial {
				t.Errorf("last history entry %+v, want cooling → probe_allowed (refused/dial) %q at %v", last, tc.want, until)
			}
			if prev := h[len(h)-2]; prev.To != Cooling {
				t.Errorf("entry before it %+v, want the one to cooling", prev)
			}
			if !strings.Contains(logs.String(), "upstream record restored") || !strings.Contains(logs.String(), tc.want) {
				t.Errorf("no restored line saying %q:\n%s", tc.want, logs.String())
			}
		})
	}
}
