package health

import "sync/atomic"

// Gate is a one-word summary of a record's admission state that the
// record publishes into memory its caller owns. A selection strategy
// looking at a random sample of a large pool pays one cache miss per
// candidate for the record alone (records are large and scattered); a gate
// kept in the caller's dense per-endpoint array answers the common cases
// from a line it reads anyway: open (eligible, no slow-start ramp, no
// per-target cooldown: admitted without touching the record) and shut (not
// eligible: refused). Anything else, and a gate no record publishes to,
// reads as "ask the tracker".
//
// The record writes its gate under its lock, right after the state it
// summarises, so reading the gate is as current as reading the state.
// The zero Gate asks.
type Gate struct{ w atomic.Uint32 }

// Gate values.
const (
	gateAsk uint32 = iota
	gateOpen
	gateShut
)

// Bind makes r publish to g from now on, and publishes r's state now. A
// record publishes to one gate: the one it published to before (a previous
// snapshot's) is reset to ask, so its holders consult the tracker.
func (t *Tracker) Bind(r *Record, g *Gate) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gate != nil && r.gate != g {
		r.gate.w.Store(gateAsk)
	}
	r.gate = g
	r.publish()
}

// EligibleVia is Eligible for r, answered by g when g is bound to r and
// knows.
func (t *Tracker) EligibleVia(g *Gate, r *Record) bool {
	switch g.w.Load() {
	case gateOpen:
		return true
	case gateShut:
		return false
	}
	return t.Eligible(r)
}

// AdmitTargetVia is AdmitTarget for r, answered by g when g is bound to r
// and knows: an open gate admits (no ramp slot to consume, no per-target
// cooldown to check), a shut one refuses.
func (t *Tracker) AdmitTargetVia(g *Gate, r *Record, host string) bool {
	switch g.w.Load() {
	case gateOpen:
		return true
	case gateShut:
		return false
	}
	return t.AdmitTarget(r, host)
}

// askGate makes r's gate ask the tracker until the next publish: setState
// into eligible uses it, since whether a ramp follows is decided after it
// (readmit: startRamp publishes). Caller holds r.mu.
func (r *Record) askGate() {
	if r.gate != nil {
		r.gate.w.Store(gateAsk)
	}
}

// publish writes r's admission summary to its gate. It is called after
// every change of state, ramping, ntargets or removed, at a point where
// they are consistent (readmit publishes once the ramp has started).
// Caller holds r.mu.
func (r *Record) publish() {
	if r.gate == nil {
		return
	}
	v := gateAsk
	switch {
	case r.removed || State(r.state.Load()) != Eligible:
		v = gateShut
	case !r.ramping.Load() && r.ntargets.Load() == 0:
		v = gateOpen
	}
	r.gate.w.Store(v)
}
