package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// poolFailures gathers rotor_failures_total: "class/stage" → value.
func poolFailures(t *testing.T, srv *Server) map[string]float64 {
	t.Helper()
	mfs, err := srv.metrics.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "rotor_failures_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var class, stage string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "class":
					class = l.GetValue()
				case "stage":
					stage = l.GetValue()
				}
			}
			out[class+"/"+stage] = m.GetCounter().GetValue()
		}
	}
	return out
}

// noDecrease reports every label of before whose value is lower in after.
func noDecrease(t *testing.T, step string, before, after map[string]float64) {
	t.Helper()
	for k, v := range before {
		if after[k] < v {
			t.Errorf("%s: rotor_failures_total{%s} went down from %v to %v", step, k, v, after[k])
		}
	}
}

func reloadText(t *testing.T, srv *Server, text string) {
	t.Helper()
	cfg, err := ParseConfig("admin_test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
}

// TestPoolFailuresMonotonic: rotor_failures_total is a counter, so a
// reload that removes an upstream must not take its failures out of the
// pool-wide total (bug: it summed the live records only, and went down).
// Put back while its record is kept, the upstream's failures are not
// counted twice; put back after the record expired, as a new upstream, the
// total keeps them still.
func TestPoolFailuresMonotonic(t *testing.T) {
	withoutBob := adminConfig[:strings.Index(adminConfig, "[[upstream]]\nurl  = \"http://bob")]
	f := newAdminFixture(t, adminConfig, fixedClock())
	srv := f.srv
	dc1 := srv.pool.Lookup("dc-1")
	bob := srv.pool.Lookup("bob@127.0.0.1:2")
	srv.pool.Report(dc1, &health.Failure{Class: health.Refused, Stage: health.StageDial})
	for range 3 {
		srv.pool.Report(bob, &health.Failure{Class: health.Timeout, Stage: health.StageProxyHandshake})
	}
	srv.pool.Report(bob, &health.Failure{Class: health.Refused, Stage: health.StageDial})
	first := poolFailures(t, srv)
	if first["refused/dial"] != 2 || first["timeout/proxy_handshake"] != 3 {
		t.Fatalf("rotor_failures_total before the reload: %v", first)
	}

	reloadText(t, srv, withoutBob)
	afterRemoval := poolFailures(t, srv)
	noDecrease(t, "bob removed", first, afterRemoval)

	// dc-1 fails again: the total goes on from where it was.
	srv.pool.Report(srv.pool.Lookup("dc-1"), &health.Failure{Class: health.Refused, Stage: health.StageDial})
	grown := poolFailures(t, srv)
	noDecrease(t, "dc-1 failed again", afterRemoval, grown)
	if grown["refused/dial"] != 3 {
		t.Errorf("rotor_failures_total{refused/dial} = %v after dc-1's second failure, want 3", grown["refused/dial"])
	}

	// bob back within 15 minutes: its record, and its failures, are back;
	// the total counts them once.
	f.clk.Advance(time.Minute)
	reloadText(t, srv, adminConfig)
	if got := srv.tr.Snapshot(srv.pool.Lookup("bob@127.0.0.1:2").Record()); got.Failures[health.Timeout] != 3 {
		t.Fatalf("bob back: its record was not kept (%v)", got.Failures)
	}
	back := poolFailures(t, srv)
	noDecrease(t, "bob back", grown, back)
	if back["refused/dial"] != 3 || back["timeout/proxy_handshake"] != 3 {
		t.Errorf("rotor_failures_total with bob back: %v, want refused/dial 3 and timeout/proxy_handshake 3 (counted once)", back)
	}

	// bob leaves again, and comes back after its record expired: a new
	// record, no failures of its own; the total keeps the old ones.
	reloadText(t, srv, withoutBob)
	gone := poolFailures(t, srv)
	noDecrease(t, "bob removed again", back, gone)
	f.clk.Advance(16 * time.Minute)
	expired := poolFailures(t, srv)
	noDecrease(t, "bob's record expired", gone, expired)
	reloadText(t, srv, adminConfig)
	if got := srv.tr.Snapshot(srv.pool.Lookup("bob@127.0.0.1:2").Record()); len(got.Counts) != 0 {
		t.Fatalf("bob back after 16 minutes: record kept (%v), want a new one", got.Counts)
	}
	fresh := poolFailures(t, srv)
	noDecrease(t, "bob back as new", expired, fresh)
	if fresh["refused/dial"] != 3 || fresh["timeout/proxy_handshake"] != 3 {
		t.Errorf("rotor_failures_total with bob new: %v, want refused/dial 3 and timeout/proxy_handshake 3", fresh)
	}
	srv.pool.Report(srv.pool.Lookup("bob@127.0.0.1:2"), &health.Failure{Class: health.Timeout, Stage: health.StageProxyHandshake})
	if got := poolFailures(t, srv); got["timeout/proxy_handshake"] != 4 {
		t.Errorf("rotor_failures_total{timeout/proxy_handshake} = %v after new bob's failure, want 4", got["timeout/proxy_handshake"])
	}
}
