package gateway

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
)

// TestStateFileKeepsUpstreamLeftOutWhileStopped: an upstream taken out of
// the config while rotor was stopped keeps its record (history, operator
// disable) as a reload that removes it does: the start that no longer
// finds it in the config keeps the record as removed, from that start on,
// the state file carries it across further restarts, and the upstream back
// in the config gets it back. It was counted "stale" and dropped at the
// first start without it.
func TestStateFileKeepsUpstreamLeftOutWhileStopped(t *testing.T) {
	dir := t.TempDir()
	full := stateConfig(dir)
	withoutBob := full[:strings.Index(full, "[[upstream]]\nurl  = \"http://bob")]
	path := stateFilePath(dir)
	clk := fixedClock()

	// Run 1: an operator disables bob; rotor stops.
	disableBobAndStop(t, full, clk)

	// Run 2, 20 minutes later (longer than a removed record is kept: the
	// removal is seen now, not when the file was written): bob is gone
	// from the config.
	clk.Advance(20 * time.Minute)
	seen := clk.Now()
	logs := runStateStart(t, withoutBob, clk)
	if !strings.Contains(logs.String(), `"stale":1`) || !strings.Contains(logs.String(), `"removed":1`) {
		t.Errorf("the record of bob, out of the config, not logged as kept: %s", logs.String())
	}
	if got := removedIn(t, path); len(got) != 1 || !got["bob@127.0.0.1:2"].Equal(seen) {
		t.Fatalf("state file after a start without bob: removed %v, want bob removed at %v", got, seen)
	}

	// Run 3, 5 minutes later, still without bob: the record stays kept,
	// removed when run 2 saw it gone.
	clk.Advance(5 * time.Minute)
	runStateStart(t, withoutBob, clk)
	if got := removedIn(t, path); len(got) != 1 || !got["bob@127.0.0.1:2"].Equal(seen) {
		t.Fatalf("state file after a second start without bob: removed %v, want bob removed at %v", got, seen)
	}

	// Run 4, 5 more minutes: bob is back, with its disable and history.
	clk.Advance(5 * time.Minute)
	d, logs := newStateServer(t, full, clk)
	d.startStateFile()
	bob := snapOf(t, d, "bob@127.0.0.1:2")
	if bob.State != health.Disabled || bob.Reason != health.Operator {
		t.Errorf("bob back in the config: %v %v, want disabled operator", bob.State, bob.Reason)
	}
	if len(bob.History) != 1 || !strings.Contains(bob.History[0].Detail, "bad exit IPs") {
		t.Errorf("bob's history back in the config: %+v", bob.History)
	}
	if !strings.Contains(logs.String(), `"revived":1`) {
		t.Errorf("bob's return not logged: %s", logs.String())
	}
	d.stopStateFile()
	if n, got := len(readStateDoc(t, path).Records), removedIn(t, path); n != 2 || len(got) != 0 {
		t.Errorf("bob back: %d records, removed %v; want 2 and none", n, got)
	}
}

// TestStateFileLeftOutExpires: the record of an upstream left out of the
// config while rotor was stopped expires as a reload-removed one does,
// goneKeep after the start that saw it gone, not sooner.
func TestStateFileLeftOutExpires(t *testing.T) {
	dir := t.TempDir()
	full := stateConfig(dir)
	withoutBob := full[:strings.Index(full, "[[upstream]]\nurl  = \"http://bob")]
	path := stateFilePath(dir)
	clk := fixedClock()

	disableBobAndStop(t, full, clk)

	clk.Advance(time.Minute)
	runStateStart(t, withoutBob, clk)

	// 14m59s after run 2: kept still.
	clk.Advance(15*time.Minute - time.Second)
	runStateStart(t, withoutBob, clk)
	if got := removedIn(t, path); len(got) != 1 {
		t.Fatalf("bob's record dropped before its 15 minutes: removed %v", got)
	}

	// 15 minutes after run 2: expired; bob back is a new record.
	clk.Advance(time.Second)
	d, logs := newStateServer(t, full, clk)
	d.startStateFile()
	if got := snapOf(t, d, "bob@127.0.0.1:2"); got.State != health.Eligible || len(got.History) != 0 {
		t.Errorf("bob back 15 minutes after a start without it: %v %+v, want a fresh eligible record", got.State, got.History)
	}
	if !strings.Contains(logs.String(), `"expired":1`) {
		t.Errorf("expiry not logged: %s", logs.String())
	}
	d.stopStateFile()
}

// TestStateFileLeftOutConfigDisabled: an upstream the config disabled,
// left out while rotor was stopped and back without disabled = true, is
// not kept disabled: the config, not an operator, had disabled it.
func TestStateFileLeftOutConfigDisabled(t *testing.T) {
	dir := t.TempDir()
	full := stateConfig(dir)
	at := strings.Index(full, "[[upstream]]\nurl  = \"http://bob")
	withoutBob := full[:at]
	bobDisabled := full + "disabled = true\n"
	clk := fixedClock()

	a, _ := newStateServer(t, bobDisabled, clk)
	a.startStateFile()
	if got := snapOf(t, a, "bob@127.0.0.1:2"); got.State != health.Disabled {
		t.Fatalf("bob disabled in the config: %v", got.State)
	}
	a.stopStateFile()

	clk.Advance(time.Minute)
	runStateStart(t, withoutBob, clk)

	clk.Advance(time.Minute)
	c, _ := newStateServer(t, full, clk)
	c.startStateFile()
	if got := snapOf(t, c, "bob@127.0.0.1:2"); got.State == health.Disabled {
		t.Errorf("bob back without disabled = true: %v %v %q, want it not disabled", got.State, got.Reason, got.Detail)
	}
	c.stopStateFile()
}

func stateFilePath(dir string) string { return filepath.Join(dir, "state", "rotor-state.json") }

// TestStateFileConfigDisableLifted: an upstream the config disabled, still
// configured but without disabled = true at the next start, is not kept
// disabled by the state file's record of that disable (bug: it came back
// "disabled, operator, disabled in config", and only an operator's enable
// brought it back); its counters are restored.
func TestStateFileConfigDisableLifted(t *testing.T) {
	dir := t.TempDir()
	full := stateConfig(dir)
	clk := fixedClock()
	a, _ := newStateServer(t, full+"disabled = true\n", clk)
	a.tr.Success(a.pool.Lookup("bob@127.0.0.1:2").Record())
	a.startStateFile()
	a.stopStateFile()

	clk.Advance(time.Minute)
	b, _ := newStateServer(t, full, clk)
	b.startStateFile()
	defer b.stopStateFile()
	got := snapOf(t, b, "bob@127.0.0.1:2")
	if got.State == health.Disabled {
		t.Errorf("bob no longer disabled in the config: %v %v %q after the restart, want it not disabled", got.State, got.Reason, got.Detail)
	}
	if got.Successes != 1 {
		t.Errorf("bob's counters after the restart: successes %d, want 1", got.Successes)
	}

	// Still disabled in the config: stays disabled.
	clk.Advance(time.Minute)
	b.stopStateFile()
	c, _ := newStateServer(t, full+"disabled = true\n", clk)
	c.startStateFile()
	defer c.stopStateFile()
	if got := snapOf(t, c, "bob@127.0.0.1:2"); got.State != health.Disabled {
		t.Errorf("bob disabled in the config: %v after the restart", got.State)
	}
}

// runStateStart is one rotor run on text: a start that restores the state
// file and a stop that writes it. It returns the run's log.
func runStateStart(t *testing.T, text string, clk *healthtest.Clock) *logBuffer {
	t.Helper()
	srv, logs := newStateServer(t, text, clk)
	srv.startStateFile()
	srv.stopStateFile()
	return logs
}

// disableBobAndStop is a run on text in which an operator disables bob.
func disableBobAndStop(t *testing.T, text string, clk *healthtest.Clock) {
	t.Helper()
	srv, _ := newStateServer(t, text, clk)
	srv.startStateFile()
	srv.tr.Disable(srv.pool.Lookup("bob@127.0.0.1:2").Record(), "bad exit IPs")
	srv.stopStateFile()
}
