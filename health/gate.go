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
//
// With a roster, r also keeps member i of ro in it exactly while g is not
// shut. g must then be member i's gate, and both fresh (g asking, i in, as
// created) or bound together before.
func (t *Tracker) Bind(r *Record, g *Gate, ro *Roster, i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gate != g {
		r.setGate(gateAsk)
	}
	r.gate, r.roster, r.member = g, ro, i
	r.publish()
}

// Known returns g's own answer when it has one: admit for an open gate
// (eligible, no slow-start slot to consume, no per-target cooldown to
// check), refuse for a shut one (not eligible). ok is false when g asks
// the tracker. It lets a caller fetch the record only when needed.
func (g *Gate) Known() (admit, ok bool) {
	switch g.w.Load() {
	case gateOpen:
		return true, true
	case gateShut:
		return false, true
	}
	return false, false
}

// Shut reports whether g refuses without asking: its record is not
// eligible. A strategy uses it to draw again at no cost when a draw lands
// on an endpoint that is out.
func (g *Gate) Shut() bool { return g.w.Load() == gateShut }

// askGate makes r's gate ask the tracker until the next publish: setState
// into eligible uses it, since whether a ramp follows is decided after it
// (readmit: startRamp publishes). Caller holds r.mu.
func (r *Record) askGate() { r.setGate(gateAsk) }

// publish writes r's admission summary to its gate. It is called after
// every change of state, ramping, ntargets or removed, at a point where
// they are consistent (readmit publishes once the ramp has started).
// Caller holds r.mu.
func (r *Record) publish() {
	v := gateAsk
	switch {
	case r.removed || State(r.state.Load()) != Eligible:
		v = gateShut
	case !r.ramping.Load() && r.ntargets.Load() == 0:
		v = gateOpen
	}
	r.setGate(v)
}

// setGate writes v to r's gate and, when the gate opens from shut or
// shuts, moves r in or out of its roster, after the gate: a reader that
// finds r in the roster reads a gate at least as new. Every write of a
// bound gate goes through here, so roster membership and gate agree.
// Caller holds r.mu.
func (r *Record) setGate(v uint32) {
	if r.gate == nil {
		return
	}
	if old := r.gate.w.Swap(v); (old == gateShut) != (v == gateShut) && r.roster != nil {
		r.roster.set(r.member, v != gateShut)
	}
}
