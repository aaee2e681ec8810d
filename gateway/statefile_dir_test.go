package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stateLogLine is what the tests of this file read of a log line.
type stateLogLine struct {
	Level   string `json:"level"`
	Err     string `json:"error"`
	Message string `json:"message"`
}

// stateLines returns the log lines whose message or error mention the
// state file, in order.
func stateLines(t *testing.T, logs string) []stateLogLine {
	t.Helper()
	var got []stateLogLine
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var ev stateLogLine
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if strings.Contains(ev.Message, "state file") || strings.Contains(ev.Err, "state file") {
			got = append(got, ev)
		}
	}
	return got
}

// checkStateFile writes a config holding state_file = stateFile (as
// written, relative to dir) and returns what -check says of it.
func checkStateFile(t *testing.T, dir, stateFile string) (path string, err error) {
	t.Helper()
	path = filepath.Join(dir, "rotor.toml")
	text := "state_file = " + strconvQuote(stateFile) + "\n[[upstream]]\nurl = \"direct://\"\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, CheckConfig(path)
}

// TestCheckStateFileUnwritable: -check reports, at state_file's line, a
// state file rotor could never write: a parent that is a regular file
// (its directory can be neither made nor written), a directory at the
// path itself (bug: -check said ok, and a start logged "not a directory
// (it will not be written)" then "not writing over a file that could not
// be read or set aside" at every write). A path whose missing
// directories can be made is fine, and -check makes none of them.
func TestCheckStateFileUnwritable(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "proxies.txt")
	if err := os.WriteFile(list, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "adir"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, stateFile, want string // want "": no error
	}{
		{"parent is a file", "proxies.txt/state.json", "proxies.txt/state.json cannot be written: " + list + " is not a directory"},
		{"missing directory under a file", "proxies.txt/state/state.json", "proxies.txt/state/state.json cannot be written: " + list + " is not a directory"},
		{"path is a directory", "adir", "adir cannot be written: it is a directory"},
		{"missing directories that can be made", "state/a/b/state.json", ""},
		{"in the config's directory", "state.json", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path, err := checkStateFile(t, dir, tt.stateFile)
			want := ""
			if tt.want != "" {
				want = path + ":1: state_file " + filepath.Join(dir, tt.want)
			}
			if got := errString(err); got != want {
				t.Errorf("-check: %q\nwant %q", got, want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "state")); err == nil {
		t.Error("-check made the state file's directory")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".rotor-check-*")); len(left) > 0 {
		t.Errorf("-check left its test files behind: %v", left)
	}
}

// TestCheckStateFileNoWritePermission: a directory the user may not
// write in (here by its mode; a read-only mount or a root-owned volume is
// the same to rotor) is a -check error, as is one that cannot be made
// there.
func TestCheckStateFileNoWritePermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root, which mode bits do not stop; TestCheckStateFileUnwritable and TestStateDirErrorReadOnlyDir cover the check")
	}
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(ro, 0o755) })
	for _, tt := range []struct{ stateFile, want string }{
		{"ro/state.json", "ro/state.json cannot be written: cannot create a file in directory " + ro + ": permission denied"},
		{"ro/sub/state.json", "ro/sub/state.json cannot be written: directory " + filepath.Join(ro, "sub") + " does not exist and cannot be made in " + ro + ": permission denied"},
	} {
		path, err := checkStateFile(t, dir, tt.stateFile)
		if want := path + ":1: state_file " + filepath.Join(dir, tt.want); errString(err) != want {
			t.Errorf("-check: %q\nwant %q", errString(err), want)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestStateFileUnwritableWarnsOnce: a start whose state file cannot be
// written (its parent is a regular file) says so in one warning naming
// the cause and runs on; the writes that follow say nothing more, and the
// first one that succeeds once the cause is gone says so (bug: "state
// file not restored: … not a directory (it will not be written)", then
// "not writing over a file that could not be read or set aside", a file
// that was not there).
func TestStateFileUnwritableWarnsOnce(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "proxies.txt")
	if err := os.WriteFile(list, []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(list, "state.json")
	srv, logs := newStateServer(t, "state_file = "+strconvQuote(path)+"\n"+adminConfig, fixedClock())
	srv.startStateFile()
	for _, name := range []string{"dc-1", "bob@127.0.0.1:2"} {
		srv.tr.Disable(srv.pool.Lookup(name).Record(), "x")
		srv.writeState()
	}
	want := "state file " + path + " cannot be written: " + list + " is not a directory"
	got := stateLines(t, logs.String())
	if len(got) != 1 || got[0].Level != "warn" || got[0].Err != want ||
		got[0].Message != "state file cannot be written: upstream records will not survive a restart" {
		t.Fatalf("state file lines %+v, want one warning with error %q; log:\n%s", got, want, logs)
	}

	// The operator moves the file out of the way: the next write goes
	// through, and says so once.
	if err := os.Remove(list); err != nil {
		t.Fatal(err)
	}
	srv.stopStateFile()
	if doc := readStateDoc(t, path); len(doc.Records) != 2 {
		t.Errorf("state file after the fix: %+v", doc.Records)
	}
	got = stateLines(t, logs.String())
	if len(got) != 2 || got[1].Level != "info" || got[1].Message != "state file written again" {
		t.Errorf("state file lines %+v, want the warning then one info line saying it is written again; log:\n%s", got, logs)
	}
}

// TestStateFileWriteErrorLoggedOnce: a write failure that repeats is
// logged once, however many writes meet it, and again when writes
// succeed (bug: each write's error named the temporary file, a name new
// at every write, so the same failure was logged at every write: a
// root-owned /var/lib/rotor logged "permission denied" every second).
// Here a directory appears at the path after the start: each rename of
// the temporary file over it fails.
func TestStateFileWriteErrorLoggedOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	srv, logs := newStateServer(t, "state_file = "+strconvQuote(path)+"\n"+adminConfig, fixedClock())
	srv.startStateFile()
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"dc-1", "bob@127.0.0.1:2", "dc-1"} {
		srv.tr.Disable(srv.pool.Lookup(name).Record(), "x")
		srv.writeState()
	}
	got := stateLines(t, logs.String())
	if len(got) != 1 || got[0].Message != "state file not written" || !strings.HasPrefix(got[0].Err, "state file "+path+": rename the temporary file over "+path+": ") ||
		strings.Contains(got[0].Err, ".tmp-") {
		t.Fatalf("state file lines %+v, want one error naming the rename and no temporary file; log:\n%s", got, logs)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	srv.stopStateFile()
	if doc := readStateDoc(t, path); len(doc.Records) != 2 {
		t.Errorf("state file after the fix: %+v", doc.Records)
	}
	if got = stateLines(t, logs.String()); len(got) != 2 || got[1].Message != "state file written again" {
		t.Errorf("state file lines %+v, want the error then one line saying it is written again; log:\n%s", got, logs)
	}
}

// TestStateFileBlockedSaidOnce: a directory at the state file's path at
// start is said once, by "state file not restored" naming it, and the
// refused writes that follow say nothing more (they said "not writing
// over a file that could not be read or set aside" once more, after the
// start had said it would not be written).
func TestStateFileBlockedSaidOnce(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, logs := newStateServer(t, "state_file = "+strconvQuote(path)+"\n"+adminConfig, fixedClock())
	srv.startStateFile()
	srv.tr.Disable(srv.pool.Lookup("dc-1").Record(), "x")
	srv.writeState()
	srv.stopStateFile()
	got := stateLines(t, logs.String())
	if len(got) != 1 || got[0].Message != "state file not restored" || !strings.Contains(got[0].Err, "is a directory") {
		t.Errorf("state file lines %+v, want one saying it is not restored as it is a directory; log:\n%s", got, logs)
	}
	if err := srv.saveState(); err == nil || err.Error() != "state file "+path+" not written: it is a directory" {
		t.Errorf("saveState: %v, want it refused as a directory is there", err)
	}
}
