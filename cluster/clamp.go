package cluster

import (
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// settled reports whether rec makes a probe needless at now: a probe
// passed (eligible), an operator disabled it, or a cooldown still runs, by
// its clamped deadline (bug: by the raw one, so a cooling a peer with a
// clock far ahead wrote stayed "running" here after its clamped end; the
// lease was dropped and the record clamped anew, with no probe, until the
// peer's own deadline).
func (c *Cluster) settled(rec record, now time.Time) bool {
	switch rec.State {
	case "eligible", "disabled":
		return true
	case "cooling":
		rs, ok := rec.remote()
		return ok && c.clamp(rs).Until.After(now)
	}
	return false
}

// clampNote is the clamped end (limit) of one remote cooling, told from
// others by its time, instance and raw until.
type clampNote struct {
	at    time.Time
	inst  string
	until time.Time
	limit time.Time
}

// clamp bounds a remote cooling deadline to the class's max cooldown plus
// the skew tolerance, so a peer with a clock far ahead cannot park an
// upstream for longer than this instance's policy allows. The bound is
// counted from the transition's time, or from when this instance first
// read that cooling if its time is ahead of this instance's clock, and is
// fixed once per cooling: counted from each reading, the same cooling read
// again (TryProbe, a write's answer, a resync) was parked anew each time.
func (c *Cluster) clamp(rs health.RemoteState) health.RemoteState {
	if rs.State != health.Cooling {
		return rs
	}
	bound := c.tr.Policy().For(rs.Reason).Max + c.cfg.MaxClockSkew
	c.mu.Lock()
	n, ok := c.clamps[rs.Key]
	if !ok || !n.at.Equal(rs.At) || n.inst != rs.Instance || !n.until.Equal(rs.Until) {
		base := time.Now()
		if !rs.At.IsZero() && rs.At.Before(base) {
			base = rs.At
		}
		n = clampNote{at: rs.At, inst: rs.Instance, until: rs.Until, limit: base.Add(bound)}
		if rs.Until.After(n.limit) {
			c.clamps[rs.Key] = n
		} else {
			delete(c.clamps, rs.Key)
		}
	}
	c.mu.Unlock()
	if rs.Until.After(n.limit) {
		rs.Until = n.limit
	}
	return rs
}
