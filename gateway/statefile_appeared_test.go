package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStateFileAppearedAfterStartKept: a state file put back after a start
// that could read none (its directory was a file then) is set aside, not
// written over. Issue: an operator moved the state directory away and
// back around a start; rotor's next write replaced the file, and three
// operator disables and every history were gone at the next restart.
func TestStateFileAppearedAfterStartKept(t *testing.T) {
	dir := t.TempDir()
	text := stateConfig(dir)
	a, _ := newStateServer(t, text, fixedClock())
	a.tr.Disable(a.pool.Lookup("bob@127.0.0.1:2").Record(), "maintenance")
	if err := a.saveState(); err != nil {
		t.Fatal(err)
	}
	path := a.cfg.Load().StateFile
	stateDir := filepath.Dir(path)
	if err := os.Rename(stateDir, stateDir+".bak"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stateDir, []byte("x\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	b, logs := newStateServer(t, text, fixedClock())
	b.startStateFile() // reads nothing: ENOTDIR
	t.Cleanup(b.stopStateFile)
	if err := os.Remove(stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(stateDir+".bak", stateDir); err != nil {
		t.Fatal(err)
	}
	if err := b.saveState(); err != nil {
		t.Fatalf("write after the file came back: %v", err)
	}
	asides, _ := filepath.Glob(path + ".unread-*")
	if len(asides) != 1 {
		t.Fatalf("set-aside files %v, want one; log:\n%s", asides, logs)
	}
	kept, err := os.ReadFile(asides[0])
	if err != nil || !strings.Contains(string(kept), "maintenance") {
		t.Errorf("the file set aside does not hold the operator's disable: %v\n%s", err, kept)
	}
	if !strings.Contains(logs.String(), "state file appeared after start") {
		t.Errorf("no warning that the file was set aside:\n%s", logs)
	}
	if _, err := os.Stat(path); err != nil {
		t.Errorf("the new state file was not written: %v", err)
	}
	// rotor's own file from then on: written over as usual, no more
	// set-aside copies.
	b.tr.Disable(b.pool.Lookup("dc-1").Record(), "again")
	if err := b.saveState(); err != nil {
		t.Fatal(err)
	}
	if more, _ := filepath.Glob(path + ".unread-*"); len(more) != 1 {
		t.Errorf("set-aside files after rotor's own write %v, want still one", more)
	}
}

// TestStateFileFreshStartNoSetAside: with no state file at start and none
// appearing, the first write just writes.
func TestStateFileFreshStartNoSetAside(t *testing.T) {
	dir := t.TempDir()
	a, logs := newStateServer(t, stateConfig(dir), fixedClock())
	a.startStateFile()
	t.Cleanup(a.stopStateFile)
	a.tr.Disable(a.pool.Lookup("dc-1").Record(), "x")
	if err := a.saveState(); err != nil {
		t.Fatal(err)
	}
	path := a.cfg.Load().StateFile
	if asides, _ := filepath.Glob(path + ".unread-*"); len(asides) != 0 || strings.Contains(logs.String(), "appeared") {
		t.Errorf("a fresh start set something aside: %v\n%s", asides, logs)
	}
}
