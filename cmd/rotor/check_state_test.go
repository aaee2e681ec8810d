package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckStateFileUnwritable: `rotor -check` fails on a state_file
// rotor could never write, at its line, naming the cause (bug: it said
// ok for state_file = "proxies.txt/state.json" with proxies.txt a
// regular file, and the running rotor never wrote it), and on an
// [[upstream_file]] path that is a directory with one error saying so
// (bug: a bad line 1 of the directory and an empty list).
func TestCheckStateFileUnwritable(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "proxies.txt", "127.0.0.1:1\n")
	if err := os.Mkdir(filepath.Join(dir, "lists"), 0o755); err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, dir, "rotor.toml", "# state\nstate_file = \"proxies.txt/state.json\"\n"+
		"[[upstream_file]]\npath = \"lists\"\n[[upstream]]\nurl = \"direct://\"\n")
	code, out, errs := runCmd(t, "-config", path, "-check")
	want := path + ":2: state_file " + filepath.Join(dir, "proxies.txt", "state.json") + " cannot be written: " +
		filepath.Join(dir, "proxies.txt") + " is not a directory\n" +
		path + ":4: upstream_file: " + filepath.Join(dir, "lists") + " is a directory, not a list file\n"
	if code != 1 || errs != want || strings.Contains(out, "ok") {
		t.Errorf("exit %d, stdout %q, stderr:\n%s\nwant exit 1 and:\n%s", code, out, errs, want)
	}

	// Fixed: the state file's directory is made at the first write.
	writeFile(t, dir, "rotor.toml", "state_file = \"state/state.json\"\n[[upstream]]\nurl = \"direct://\"\n")
	if code, out, errs := runCmd(t, "-config", path, "-check"); code != 0 || !strings.HasSuffix(out, ": ok\n") {
		t.Errorf("exit %d, stdout %q, stderr %q; want ok", code, out, errs)
	}
}
