package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// The tester's two ways of losing an operator's disable to a probe: a
// Redis that restarts empty (variant A) and an instance that starts and
// probes during an outage (variant B). In both, the disable must hold on
// every instance until an operator enables the upstream.

// disableOn disables name through m's admin API.
func disableOn(t *testing.T, m *fleetMember, name string) {
	t.Helper()
	code, _, body := doRequest(t, "http://"+m.srv.Addr("admin"), "POST", "/api/upstreams/"+name+"/disable", "")
	if code != http.StatusOK {
		t.Fatalf("disable %s on %s: %d %s", name, m.name, code, body)
	}
}

// holdsDisabled checks that name is disabled by an operator on every
// member, now and after two resyncs (nothing may end it meanwhile), and
// that each history still lists a's disable and nothing after it.
func (f *fleet) holdsDisabled(t *testing.T, name string) {
	t.Helper()
	check := func(when string) {
		for _, m := range f.members {
			snap := stateOf(m.srv, name)
			if snap.State != health.Disabled || snap.Reason != health.Operator {
				t.Errorf("%s %s: %s %v/%v, want disabled by the operator", when, m.name, name, snap.State, snap.Reason)
				continue
			}
			h := snap.History
			if len(h) == 0 || !strings.HasPrefix(h[len(h)-1].Detail, "disabled via admin API (instance a)") {
				var b strings.Builder
				for _, tr := range h {
					fmt.Fprintf(&b, "  %v>%v %s\n", tr.From, tr.To, tr.Detail)
				}
				t.Errorf("%s %s: history does not end with a's disable:\n%s", when, m.name, b.String())
			}
		}
	}
	check("at once:")
	time.Sleep(2 * time.Second) // resync is 1s: two rounds
	check("2s later:")
}

func TestFleetDisableSurvivesEmptyRedisRestart(t *testing.T) {
	f := newFleet(t, "2s", "6s")
	a, b := f.add(t, "a"), f.add(t, "b")
	f.ready(t, a)
	f.ready(t, b)
	disableOn(t, a, "u2")
	waitState(t, b.srv, "u2", health.Disabled)

	f.redis.Stop()
	f.redis.Start() // empty
	key := "rotor:rec:" + a.srv.Pool().Lookup("u2").Record().Key()
	fleetWait(t, 5*time.Second, "a and b put the disable back", func() bool {
		return strings.Contains(f.redis.Do("GET", key), `"state":"disabled"`)
	})
	// A fresh instance (no state file) probes u1 and would probe u2.
	c := f.add(t, "c")
	fleetWait(t, 10*time.Second, "c connected to redis", func() bool { return c.srv.fleet.Connected() })
	waitState(t, c.srv, "u1", health.Eligible)
	waitState(t, c.srv, "u2", health.Disabled)
	f.holdsDisabled(t, "u2")
}

func TestFleetDisableSurvivesProbeDuringOutage(t *testing.T) {
	f := newFleet(t, "2s", "6s")
	a, b := f.add(t, "a"), f.add(t, "b")
	f.ready(t, a)
	f.ready(t, b)
	disableOn(t, a, "u2")
	waitState(t, b.srv, "u2", health.Disabled)
	if got := f.redis.Do("SAVE"); got != "+OK" {
		t.Fatalf("SAVE: %s", got)
	}
	f.redis.Stop()
	for _, m := range []*fleetMember{a, b} {
		fleetWait(t, 5*time.Second, m.name+" notices the outage", func() bool { return !m.srv.fleet.Connected() })
	}
	// c starts during the outage: its probe of u2 passes locally.
	c := f.add(t, "c")
	waitState(t, c.srv, "u2", health.Eligible)

	f.redis.Start() // with the saved data
	fleetWait(t, 5*time.Second, "c applies the fleet's disable", func() bool {
		return stateOf(c.srv, "u2").State == health.Disabled
	})
	f.holdsDisabled(t, "u2")
	// An operator's enable ends it, fleet-wide.
	code, _, body := doRequest(t, "http://"+b.srv.Addr("admin"), "POST", "/api/upstreams/u2/enable", "")
	if code != http.StatusOK {
		t.Fatalf("enable: %d %s", code, body)
	}
	for _, m := range f.members {
		waitState(t, m.srv, "u2", health.Eligible)
	}
}
