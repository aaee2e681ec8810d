package health

import (
	"errors"
	"testing"
)

// TestConfigAndOperatorDisables: the config (disabled = true, through Add)
// and an operator (Disable) each hold a record disabled, whichever came
// first. Bugs: the config's disable of a record an operator had disabled
// was a no-op, so an operator's enable was accepted while the entry said
// disabled (and the next reload undid it); an operator's disable of a
// record the config disabled was answered and kept nothing, so the
// config's disabled = false ended it.
func TestConfigAndOperatorDisables(t *testing.T) {
	t.Run("operator first, then the config", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, false)
		tr.Disable(r, "bad exit IPs")
		tr.Add("k", "up", nil, true) // a reload: disabled = true
		if err := tr.Enable(r); !errors.Is(err, ErrDisabledByConfig) {
			t.Fatalf("operator's enable while the config disables: %v, want ErrDisabledByConfig", err)
		}
		tr.Add("k", "up", nil, false) // the config lifts its disable
		if s := tr.Snapshot(r); s.State != Disabled || s.Detail != "bad exit IPs" {
			t.Fatalf("after the config's disabled = false: %v %q, want the operator's disable", s.State, s.Detail)
		}
		if err := tr.Enable(r); err != nil || tr.Snapshot(r).State != ProbeAllowed {
			t.Fatalf("operator's enable once the config no longer disables: %v, %v", err, tr.Snapshot(r).State)
		}
	})
	t.Run("config first, then the operator", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, true)
		tr.Disable(r, "keep off: broken")
		s := tr.Snapshot(r)
		if s.Detail != "keep off: broken" || len(s.History) != 1 || s.History[0].Detail != "keep off: broken" {
			t.Fatalf("operator's disable over the config's: detail %q history %+v, want it recorded", s.Detail, s.History)
		}
		tr.Add("k", "up", nil, false) // the config lifts its disable
		if s := tr.Snapshot(r); s.State != Disabled {
			t.Fatalf("after the config's disabled = false: %v, want the operator's disable kept", s.State)
		}
	})
	t.Run("config alone", func(t *testing.T) {
		tr, _ := newFakeTracker(t, Config{StartEligible: true})
		r := tr.Add("k", "up", nil, true)
		tr.Add("k", "up", nil, true) // an unrelated reload
		tr.Add("k", "up", nil, false)
		if s := tr.Snapshot(r).State; s != ProbeAllowed {
			t.Fatalf("after the config's disabled = false: %v, want probe_allowed", s)
		}
	})
}
