package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestPoolFailuresScrapeGap: a removed upstream's failures stayed in
// rotor_failures_total only while the tracker kept its record (15 min)
// and a scrape fell in that window: with no scrape between the removal
// and the record's expiry, they were lost and the counter went down. They
// are now carried into the total at the reload that removes the
// upstream, whatever the scrapes do; one put back in time counts once.
func TestPoolFailuresScrapeGap(t *testing.T) {
	withoutBob := adminConfig[:strings.Index(adminConfig, "[[upstream]]\nurl  = \"http://bob")]
	f := newAdminFixture(t, adminConfig, fixedClock())
	srv := f.srv
	bob := srv.pool.Lookup("bob@127.0.0.1:2")
	for range 3 {
		srv.pool.Report(bob, &health.Failure{Class: health.Timeout, Stage: health.StageProxyHandshake})
	}
	first := poolFailures(t, srv)
	if first["timeout/proxy_handshake"] != 3 {
		t.Fatalf("rotor_failures_total before the reload: %v", first)
	}

	// Removed, no scrape for 16 minutes: the record expired meanwhile.
	reloadText(t, srv, withoutBob)
	f.clk.Advance(16 * time.Minute)
	gap := poolFailures(t, srv)
	noDecrease(t, "bob removed, scraped after its record expired", first, gap)

	// Back as a new upstream (no scrape between): counted once.
	reloadText(t, srv, adminConfig)
	fresh := poolFailures(t, srv)
	noDecrease(t, "bob back as new", gap, fresh)
	if fresh["timeout/proxy_handshake"] != 3 {
		t.Errorf("rotor_failures_total with bob new: %v, want timeout/proxy_handshake 3", fresh)
	}

	// Removed and back within the window, with no scrape between: its
	// record and failures are back, counted once.
	srv.pool.Report(srv.pool.Lookup("bob@127.0.0.1:2"), &health.Failure{Class: health.Refused, Stage: health.StageDial})
	before := poolFailures(t, srv)
	reloadText(t, srv, withoutBob)
	f.clk.Advance(time.Minute)
	reloadText(t, srv, adminConfig)
	if got := srv.tr.Snapshot(srv.pool.Lookup("bob@127.0.0.1:2").Record()); got.Failures[health.Refused] != 1 {
		t.Fatalf("bob back: its record was not kept (%v)", got.Failures)
	}
	back := poolFailures(t, srv)
	noDecrease(t, "bob back in time", before, back)
	if back["refused/dial"] != before["refused/dial"] || back["timeout/proxy_handshake"] != 3 {
		t.Errorf("rotor_failures_total with bob back: %v, want %v (counted once)", back, before)
	}
}
