package health

import (
	"strings"
	"time"
)

// Outlook is why a record does not serve now and when it may again, for
// the text a client gets when no upstream was eligible (upstream's
// NoEligibleError). It carries no failure detail: details can hold what
// a peer sent, and the client is told classes and times only.
type Outlook struct {
	State  State
	Reason Class // class of the last failure (or operator)
	// Left is how long a cooling record still cools (0 unless cooling).
	Left time.Duration
	// ProbeTargetDown is set when the record cools because probes through
	// different upstreams failed at the probe target itself (its cooldown
	// stays at base; see the prober): the probe target seems down, not
	// the upstream.
	ProbeTargetDown bool
}

// probeTargetDownDetail begins the detail of a cooling the prober made
// because the probe target seems down (prober.go).
const probeTargetDownDetail = "probe target seems down"

// Outlook returns r's Outlook without copying the record (a Snapshot
// copies its history): an expired wait reads it for every upstream that
// is out.
func (t *Tracker) Outlook(r *Record) Outlook {
	now := t.clock.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	o := Outlook{State: r.effectiveState(now), Reason: r.reason}
	if o.State == Cooling {
		o.Left = r.deadline.Sub(now)
		o.ProbeTargetDown = strings.HasPrefix(r.detail, probeTargetDownDetail)
	}
	return o
}
