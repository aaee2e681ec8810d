package gateway

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestFleetClampedCoolingProbed is the tester's repro on three instances:
// a peer whose clock runs 10 h ahead stores a cooling of u1 until then
// (and publishes it); u1 itself is healthy. Every instance clamps it to
// the refused max (2s) plus max_clock_skew (2s), and once that has run out
// one instance probes u1 and its passing probe re-admits u1 everywhere.
// Bug: no probe ran; each instance went cooling → probe_allowed → cooling
// with a fresh clamp every 4 s until the peer's own deadline.
func TestFleetClampedCoolingProbed(t *testing.T) {
	f := startFleet(t, "2s", "1s")
	key := f.members[0].srv.Pool().Lookup("u1").Record().Key()
	before := f.probe.Requests()
	now := time.Now()
	peer := map[string]any{
		"key": key, "v": 1000, "state": "cooling", "from": "eligible", "reason": "refused", "stage": "dial",
		"detail": "refused", "until": now.Add(10 * time.Hour).UnixMilli(), "streak": 1, "at": now.UnixMilli(),
		"inst": "z", "tok": "z/1",
		"hist": []map[string]any{{"at": now.UnixMilli(), "from": "eligible", "to": "cooling", "reason": "refused",
			"stage": "dial", "detail": "refused", "inst": "z"}},
	}
	raw, _ := json.Marshal(peer)
	f.redis.Do("SET", "rotor:rec:"+key, string(raw))
	f.redis.Do("PUBLISH", "rotor:events", string(raw))
	for _, m := range f.members {
		fleetWait(t, 5*time.Second, m.name+" applies the peer's cooling", func() bool {
			return stateOf(m.srv, "u1").State == health.Cooling
		})
		if until := stateOf(m.srv, "u1").Until; until.After(now.Add(5 * time.Second)) {
			t.Errorf("%s: u1 cooling until %v, want it clamped to 4s", m.name, until)
		}
	}
	for _, m := range f.members {
		fleetWait(t, 30*time.Second, m.name+" re-admits u1 after a probe", func() bool {
			return stateOf(m.srv, "u1").State == health.Eligible
		})
	}
	if got := f.probe.Requests() - before; got != 1 {
		t.Errorf("probe target saw %d probes of u1 after the clamped cooldown, want 1", got)
	}
}
