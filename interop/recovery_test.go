package interop

import (
	"strings"
	"testing"
	"time"
)

// TestRecovery: a real upstream is killed, cools as refused, stays out while
// it is down, and after a restart on the same port becomes eligible again
// only once the probe target has seen its probe (through that upstream's
// exit address).
func TestRecovery(t *testing.T) {
	begin(t)
	for _, k := range kinds {
		t.Run("upstream="+k.Kind, func(t *testing.T) {
			caseT(t)
			t.Parallel()
			tg := newTarget(t)
			u := startUpstream(t, k.Kind, srvOpts{})
			r := startRotor(t, rotorOpts{
				Upstreams: []rotorUpstream{{Name: k.Kind, URL: u.URL(u.Pass)}},
				ProbeURL:  tg.URL + probePath,
			})
			r.waitRecord(t, k.Kind, 10*time.Second, "eligible at start", func(rec record) bool {
				return rec.State == "eligible"
			})

			u.kill()
			rep, c := socksConnect(r.SOCKS, []byte{0}, "", "", tg.Addr)
			if c != nil {
				c.Close()
				t.Fatalf("CONNECT through a killed upstream succeeded")
			}
			r.waitRecord(t, k.Kind, 5*time.Second, "cooling for refused", func(rec record) bool {
				return rec.State != "eligible" && cooledFor(rec, "refused", "")
			})
			t.Logf("client saw SOCKS reply %d while the upstream was down", rep.Rep)

			// Past the longest refused cooldown (2s) the probe keeps failing:
			// the upstream must not come back while it is down.
			downUntil := time.Now().Add(3 * time.Second)
			for time.Now().Before(downUntil) {
				if rec := r.upstream(t, k.Kind); rec.State == "eligible" {
					t.Fatalf("eligible again while the upstream is down: %s", rec)
				}
				time.Sleep(100 * time.Millisecond)
			}

			probes := tg.count(u.ExitIP, probePath)
			u.start()
			rec := r.waitRecord(t, k.Kind, 15*time.Second, "eligible after restart", func(rec record) bool {
				return rec.State == "eligible"
			})
			if got := tg.count(u.ExitIP, probePath); got <= probes {
				t.Errorf("eligible again but the target saw no probe from %s after the restart (probes %d before, %d now; counts %s): %s",
					u.ExitIP, probes, got, tg.counts(), rec)
			}

			// And it carries traffic again.
			out, err := curlFetch(t, "--socks5-hostname", r.SOCKS, tg.URL+"/after")
			if err != nil || !strings.Contains(out, okBody(u.ExitIP)) {
				t.Errorf("after recovery: %v %q", err, out)
			}
		})
	}
}
