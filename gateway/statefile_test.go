package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rotor-proxy/rotor/upstream"
)

// stateConfig is adminConfig with a state file in dir.
func stateConfig(dir string) string {
	return "state_file = " + strconvQuote(filepath.Join(dir, "state", "rotor-state.json")) + "\n" + adminConfig
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// newStateServer builds a Server (not started) on clk from text.
func newStateServer(t *testing.T, text string, clk health.Clock) (*Server, *logBuffer) {
	t.Helper()
	cfg, err := ParseConfig("state_test.toml", []byte(text))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logs := &logBuffer{}
	srv, err := New(cfg, Options{Log: zerolog.New(logs), Clock: clk})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return srv, logs
}

func snapOf(t *testing.T, srv *Server, name string) health.Snapshot {
	t.Helper()
	e := srv.pool.Lookup(name)
	if e == nil {
		t.Fatalf("no upstream %s", name)
	}
	return srv.tr.Snapshot(e.Record())
}

// TestStateFileRoundTrip: a cooling and a disabled record keep state,
// deadline, counters and history across a restart.
func TestStateFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	text := stateConfig(dir)
	clk := fixedClock()
	a, _ := newStateServer(t, text, clk)
	dc1 := a.pool.Lookup("dc-1")
	a.tr.Success(dc1.Record())
	a.pool.Report(dc1, &health.Failure{Class: health.Refused, Stage: health.StageDial})
	a.tr.Disable(a.pool.Lookup("bob@127.0.0.1:2").Record(), "maintenance")
	before := snapOf(t, a, "dc-1")
	if before.State != health.Cooling {
		t.Fatalf("dc-1 is %v before the restart, want cooling", before.State)
	}
	a.startStateFile()
	a.stopStateFile() // final write
	path := a.cfg.Load().StateFile
	info, err := os.Stat(path)
	if err != nil {
		t.Fatalf("state file not written: %v", err)
	}
	if perm := info.Mode().Perm(); perm != 0o600 {
		t.Errorf("state file mode %v, want 0600", perm)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), canary) {
		t.Errorf("state file contains the upstream password")
	}
	var doc struct {
		Version int               `json:"version"`
		Records []json.RawMessage `json:"records"`
	}
	if err := json.Unmarshal(data, &doc); err != nil || doc.Version != stateVersion || len(doc.Records) != 2 {
		t.Fatalf("state file: version %d, %d records, err %v; want %d, 2 records:\n%s", doc.Version, len(doc.Records), err, stateVersion, data)
	}
	for _, rec := range doc.Records { // one compact record per line
		if !strings.Contains(string(data), "\n    "+string(rec)) || bytes.Contains(rec, []byte("\n")) {
			t.Errorf("record not on a line of its own: %s", rec)
		}
	}
	if leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}

	// The restart: 10s later on the same wall clock.
	clk.Advance(10 * time.Second)
	b, logs := newStateServer(t, text, clk)
	b.startStateFile()
	t.Cleanup(b.stopStateFile)
	got := snapOf(t, b, "dc-1")
	if got.State != health.Cooling || got.Reason != health.Refused || got.Stage != health.StageDial {
		t.Errorf("dc-1 after restart: %v %v %v, want cooling refused dial", got.State, got.Reason, got.Stage)
	}
	if !got.Until.Equal(before.Until) {
		t.Errorf("dc-1 until %v after restart, want %v", got.Until, before.Until)
	}
	if got.Successes != 1 || got.Failures[health.Refused] != 1 || got.LastSuccess.IsZero() {
		t.Errorf("dc-1 counters after restart: successes %d refused %d last_success %v", got.Successes, got.Failures[health.Refused], got.LastSuccess)
	}
	if len(got.History) == 0 || got.History[0].To != health.Cooling {
		t.Errorf("dc-1 history after restart: %+v", got.History)
	}
	bob := snapOf(t, b, "bob@127.0.0.1:2")
	if bob.State != health.Disabled || bob.Reason != health.Operator {
		t.Errorf("bob after restart: %v %v, want disabled operator", bob.State, bob.Reason)
	}
	if !strings.Contains(logs.String(), `"restored":2`) {
		t.Errorf("restore not logged: %s", logs.String())
	}
}

// TestStateFilePastDeadline: a cooling record whose deadline passed while
// rotor was down comes back probe_allowed.
func TestStateFilePastDeadline(t *testing.T) {
	dir := t.TempDir()
	text := stateConfig(dir)
	clk := fixedClock()
	a, _ := newStateServer(t, text, clk)
	a.pool.Report(a.pool.Lookup("dc-1"), &health.Failure{Class: health.Refused, Stage: health.StageDial})
	if err := a.saveState(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	b, _ := newStateServer(t, text, clk)
	if err := b.loadState(); err != nil {
		t.Fatal(err)
	}
	if got := snapOf(t, b, "dc-1"); got.State != health.ProbeAllowed || got.Reason != health.Refused {
		t.Errorf("dc-1 after a restart past its deadline: %v %v, want probe_allowed refused", got.State, got.Reason)
	}
	if got := snapOf(t, b, "bob@127.0.0.1:2"); got.State != health.Eligible {
		t.Errorf("bob: %v, want eligible (start_eligible)", got.State)
	}
}

// TestStateFileCorrupt: a corrupt file is set aside intact, reported, and
// start-up goes on; the writer then writes a fresh file.
func TestStateFileCorrupt(t *testing.T) {
	for _, tt := range []struct{ name, content string }{
		{"not JSON", "{\"version\": 1, \"records\": [ {\"key\": "},
		{"empty", ""},
		{"unknown version", `{"version": 99, "records": []}`},
		{"not an object", `[{"version": 1}]`},
		{"records not an array", `{"version": 1, "records": {"key": "direct://"}}`},
		{"a record that is not JSON", "{\"version\": 1, \"records\": [\n {\"key\": \"direct://\"},\n {\"key\": direct}\n]}"},
		{"trailing data", `{"version": 1, "records": []} {}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			text := stateConfig(dir)
			path := filepath.Join(dir, "state", "rotor-state.json")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			srv, logs := newStateServer(t, text, fixedClock())
			srv.startStateFile()
			asides, _ := filepath.Glob(path + ".corrupt-*")
			if len(asides) != 1 || !strings.HasSuffix(asides[0], ".corrupt-20261129T220000Z") {
				t.Fatalf("set-aside files: %v", asides)
			}
			if kept, _ := os.ReadFile(asides[0]); string(kept) != tt.content {
				t.Errorf("set-aside file content changed: %q", kept)
			}
			if !strings.Contains(logs.String(), "corrupt") || !strings.Contains(logs.String(), `"level":"error"`) {
				t.Errorf("corrupt file not logged at error: %s", logs.String())
			}
			if got := snapOf(t, srv, "dc-1"); got.State != health.Eligible {
				t.Errorf("dc-1 after a corrupt state file: %v, want a fresh eligible record", got.State)
			}
			srv.stopStateFile()
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("no fresh state file after the corrupt one: %v", err)
			}
			if _, err := parseState(data); err != nil {
				t.Errorf("fresh state file does not parse: %v", err)
			}
		})
	}
}

// TestStateFileUnreadableIsNeverOverwritten: when the path cannot be read
// (here: it is a directory), nothing is written over it.
func TestStateFileUnreadableIsNeverOverwritten(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "rotor-state.json")
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	srv, logs := newStateServer(t, stateConfig(dir), fixedClock())
	srv.startStateFile()
	srv.tr.Disable(srv.pool.Lookup("dc-1").Record(), "x")
	srv.stopStateFile()
	if info, err := os.Stat(path); err != nil || !info.IsDir() {
		t.Errorf("the unreadable path was replaced: %v", err)
	}
	if err := srv.saveState(); err == nil {
		t.Errorf("saveState wrote over an unreadable state file")
	}
	if !strings.Contains(logs.String(), "state file not restored") {
		t.Errorf("unreadable state file not reported: %s", logs.String())
	}
}

// TestStateFileWriterDebounces runs the writer in a synctest bubble: a
// transition is on disk within the debounce, a burst makes one write, and
// stop writes the final snapshot.
func TestStateFileWriterDebounces(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		srv, _ := newStateServer(t, stateConfig(dir), nil)
		path := srv.cfg.Load().StateFile
		srv.startStateFile()
		synctest.Wait()
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("state file written before any transition")
		}
		srv.tr.Disable(srv.pool.Lookup("dc-1").Record(), "x")
		srv.tr.Disable(srv.pool.Lookup("bob@127.0.0.1:2").Record(), "y")
		time.Sleep(stateDebounce / 2)
		synctest.Wait()
		if _, err := os.Stat(path); err == nil {
			t.Fatalf("state file written before the debounce elapsed")
		}
		time.Sleep(stateDebounce)
		synctest.Wait()
		doc := readStateDoc(t, path)
		if len(doc.Records) != 2 || doc.Records[0].State != health.Disabled || doc.Records[1].State != health.Disabled {
			t.Fatalf("state file after the burst: %+v", doc.Records)
		}
		// A counter changes without a transition: written by the final write.
		srv.tr.Success(srv.pool.Lookup("dc-1").Record())
		srv.stopStateFile()
		if doc := readStateDoc(t, path); doc.Records[0].Successes != 1 {
			t.Errorf("final write missed the last counters: %+v", doc.Records[0])
		}
	})
}

func readStateDoc(t *testing.T, path string) *stateDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	doc, err := parseState(data)
	if err != nil {
		t.Fatalf("state file: %v\n%s", err, data)
	}
	return doc
}

// TestStateFileIgnoresUnknownUpstreams: records of upstreams removed from
// the config are not restored onto any upstream; they are kept as removed
// (TestStateFileKeepsUpstreamLeftOutWhileStopped).
func TestStateFileIgnoresUnknownUpstreams(t *testing.T) {
	dir := t.TempDir()
	text := stateConfig(dir)
	path := filepath.Join(dir, "state", "rotor-state.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	doc := `{"version": 1, "written": "2026-11-29T21:59:00Z", "records": [
	  {"key": "socks5://gone@10.9.9.9:1080", "name": "gone", "state": "disabled", "reason": "operator", "stage": "operator", "history": []},
	  {"key": "socks5://alice@127.0.0.1:1", "name": "dc-1", "state": "disabled", "reason": "operator", "stage": "operator", "history": []}
	]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, logs := newStateServer(t, text, healthtest.NewClock(time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC)))
	if err := srv.loadState(); err != nil {
		t.Fatal(err)
	}
	if got := snapOf(t, srv, "dc-1"); got.State != health.Disabled {
		t.Errorf("dc-1: %v, want disabled", got.State)
	}
	if !strings.Contains(logs.String(), `"restored":1,"stale":1`) {
		t.Errorf("restore counts not logged: %s", logs.String())
	}
	if gone := srv.tr.ExportRemoved(); len(gone) != 1 || gone[0].Snapshot.Name != "gone" {
		t.Errorf("removed records kept: %+v, want gone's", gone)
	}
}

// TestStateFileAcrossRealRestart runs two real Servers one after the
// other on the same state file (Start, admin API, Shutdown): what an
// operator did before the restart is still there after it. The explicit
// start/stop calls are no-ops once Start and Shutdown make them.
func TestStateFileAcrossRealRestart(t *testing.T) {
	text := stateConfig(t.TempDir())
	run := func(fn func(srv *Server, base string)) {
		cfg, err := ParseConfig("state_test.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(cfg, Options{Log: zerolog.New(io.Discard)})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		srv.startStateFile()
		fn(srv, "http://"+srv.Addr("admin"))
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		srv.stopStateFile()
	}
	run(func(srv *Server, base string) {
		for _, step := range []string{"/api/upstreams/bob@127.0.0.1:2/disable", "/api/upstreams/dc-1/report"} {
			body := ""
			if strings.HasSuffix(step, "report") {
				body = `{"class":"refused"}`
			}
			if code, _, b := doRequest(t, base, "POST", step, body); code != 200 {
				t.Fatalf("POST %s: %d %s", step, code, b)
			}
		}
	})
	run(func(srv *Server, base string) {
		for name, want := range map[string]string{"dc-1": `"state": "cooling"`, "bob@127.0.0.1:2": `"state": "disabled"`} {
			_, _, body := doRequest(t, base, "GET", "/api/upstreams/"+pathEscape(name), "")
			if !strings.Contains(body, want) {
				t.Errorf("%s after restart: want %s in\n%s", name, want, body)
			}
		}
	})
}

func TestStateDelayFollowsWriteCost(t *testing.T) {
	for _, tt := range []struct{ cost, want time.Duration }{
		{0, time.Second},
		{10 * time.Millisecond, time.Second},
		{300 * time.Millisecond, 6 * time.Second}, // ~100,000 upstreams
		{2 * time.Second, 40 * time.Second},
	} {
		if got := stateDelay(tt.cost); got != tt.want {
			t.Errorf("stateDelay(%v) = %v, want %v", tt.cost, got, tt.want)
		}
	}
}

// TestStateFileKeepsRemovedRecords: a removed upstream's record is kept
// in the state file for goneKeep (15 minutes) after its removal, so that
// the upstream back in the config after a restart gets it back, as it does
// without one. It was dropped from the file at the reload that removed it:
// after a restart an operator's disable and the history were gone.
func TestStateFileKeepsRemovedRecords(t *testing.T) {
	dir := t.TempDir()
	full := stateConfig(dir)
	withoutBob := full[:strings.Index(full, "[[upstream]]\nurl  = \"http://bob")]
	path := filepath.Join(dir, "state", "rotor-state.json")
	clk := fixedClock()

	// Run 1: bob disabled by an operator, then removed from the config.
	a, _ := newStateServer(t, full, clk)
	a.startStateFile()
	a.tr.Disable(a.pool.Lookup("bob@127.0.0.1:2").Record(), "bad exit IPs; pw "+canary)
	next, err := ParseConfig("state_test.toml", []byte(withoutBob))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(next); err != nil {
		t.Fatal(err)
	}
	a.stopStateFile()
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), canary) {
		t.Errorf("state file contains the removed upstream's password:\n%s", data)
	}
	if n, got := len(readStateDoc(t, path).Records), removedIn(t, path); n != 1 || len(got) != 1 || !got["bob@127.0.0.1:2"].Equal(clk.Now()) {
		t.Fatalf("state file after the removal: %d records, removed %v; want dc-1 and bob removed at %v", n, got, clk.Now())
	}

	// Run 2, two minutes later: still without bob; the record stays kept.
	clk.Advance(2 * time.Minute)
	b, _ := newStateServer(t, withoutBob, clk)
	b.startStateFile()
	b.stopStateFile()
	if got := removedIn(t, path); len(got) != 1 {
		t.Fatalf("a restart without bob dropped its kept record: %v", got)
	}

	// Run 3, ten minutes after the removal: bob is back with its record.
	clk.Advance(8 * time.Minute)
	c, logs := newStateServer(t, full, clk)
	c.startStateFile()
	bob := snapOf(t, c, "bob@127.0.0.1:2")
	if bob.State != health.Disabled || bob.Reason != health.Operator {
		t.Fatalf("bob back after a restart: %v %v, want disabled operator", bob.State, bob.Reason)
	}
	var details []string
	for _, h := range bob.History {
		details = append(details, h.Detail)
	}
	// The history is the one bob left with; coming back is logged, not
	// listed as a transition it never made.
	if len(details) != 1 || !strings.Contains(details[0], "bad exit IPs") {
		t.Errorf("bob's history after the restart: %q", details)
	}
	if !strings.Contains(logs.String(), "back in the config 10m0s after its removal") {
		t.Errorf("bob's return not logged: %s", logs.String())
	}
	if !strings.Contains(logs.String(), `"revived":1`) {
		t.Errorf("the record back in the config not logged: %s", logs.String())
	}
	c.stopStateFile()
	if n, got := len(readStateDoc(t, path).Records), removedIn(t, path); n != 2 || len(got) != 0 {
		t.Errorf("bob back: %d records, removed %v; want 2 and none", n, got)
	}
}

// TestStateFileRemovedExpire: a kept record past 15 minutes from its
// removal is not restored, neither onto an upstream back in the config
// nor for one re-added later, and leaves the file.
func TestStateFileRemovedExpire(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state", "rotor-state.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	removed := func(key, name, ago string) string {
		return `{"key": "` + key + `", "name": "` + name + `", "state": "disabled", "reason": "operator", "stage": "operator", "detail": "gone", "history": [], "removed_at": "` + ago + `"}`
	}
	doc := `{"version": 1, "written": "2026-11-29T21:59:00Z", "records": [],
	  "removed": [
	    ` + removed("http://bob@127.0.0.1:2", "bob@127.0.0.1:2", "2026-11-29T21:45:00Z") + `,
	    ` + removed("socks5://gone@10.9.9.9:1080", "gone", "2026-11-29T21:44:59Z") + `,
	    ` + removed("socks5://later@10.9.9.9:1080", "later", "2026-11-29T21:59:00Z") + `
	]}`
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, logs := newStateServer(t, stateConfig(dir), fixedClock()) // 22:00:00
	srv.startStateFile()
	if got := snapOf(t, srv, "bob@127.0.0.1:2"); got.State != health.Eligible {
		t.Errorf("bob removed 15 minutes ago: %v, want a fresh eligible record", got.State)
	}
	if !strings.Contains(logs.String(), `"revived":0,"removed":1,"expired":2`) {
		t.Errorf("restore counts not logged: %s", logs.String())
	}
	srv.stopStateFile()
	if got := removedIn(t, path); len(got) != 1 || got["later"].IsZero() {
		t.Errorf("removed records written back: %v, want only later", got)
	}
}

// removedIn returns the removed records of the state file at path: name
// → removed_at.
func removedIn(t *testing.T, path string) map[string]time.Time {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("state file: %v", err)
	}
	var doc struct {
		Removed []struct {
			Name      string    `json:"name"`
			RemovedAt time.Time `json:"removed_at"`
		} `json:"removed"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("state file: %v\n%s", err, data)
	}
	out := map[string]time.Time{}
	for _, r := range doc.Removed {
		out[r.Name] = r.RemovedAt
	}
	return out
}

// TestRemovedSecretsPruned: the passwords kept to scrub removed records
// are dropped once the tracker no longer keeps the record.
func TestRemovedSecretsPruned(t *testing.T) {
	bob := &upstream.Endpoint{Key: "http://bob@127.0.0.1:2", URL: &url.URL{Scheme: "http", User: url.UserPassword("bob", canary), Host: "127.0.0.1:2"}}
	dc1 := &upstream.Endpoint{Key: "socks5://alice@127.0.0.1:1", URL: &url.URL{Scheme: "socks5", User: url.UserPassword("alice", "other-pw"), Host: "127.0.0.1:1"}}
	var rs removedSecrets
	rs.note([]*upstream.Endpoint{bob, dc1}, []*upstream.Endpoint{dc1})
	gone := []health.Removed{{Snapshot: health.Snapshot{Key: bob.Key}}}
	if got := rs.scrubbers(gone)[0]("x " + canary); got != "x xxxxx" {
		t.Errorf("removed bob's detail scrubbed to %q", got)
	}
	if len(rs.pw) != 1 {
		t.Errorf("%d passwords kept, want bob's only", len(rs.pw))
	}
	rs.scrubbers(nil) // bob back in the config, or forgotten
	if len(rs.pw) != 0 {
		t.Errorf("%d passwords kept after the record left the tracker, want 0", len(rs.pw))
	}
}

// TestStateFileRelativeToConfig: a relative state_file was taken from the
// working directory (/ under systemd), while upstream_ca_file and list
// files are taken from the config file's directory. It is now like them.
func TestStateFileRelativeToConfig(t *testing.T) {
	dir, cwd := t.TempDir(), t.TempDir()
	t.Chdir(cwd)
	path := filepath.Join(dir, "rotor.toml")
	text := "state_file = \"state/rotor-state.json\"\n[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n"
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "state", "rotor-state.json")); err != nil {
		t.Errorf("no state file beside the config: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cwd, "state")); err == nil {
		t.Error("the state file was written under the working directory")
	}
}

// TestStateFileBadRecordSkipped: one record that could not be read (a
// state no rotor writes) made rotor set the whole file aside, and every
// operator disable in it was lost: the disabled upstream came back
// eligible. The record is skipped with a warning naming it and its line;
// the others are restored, and the file stays where it is.
func TestStateFileBadRecordSkipped(t *testing.T) {
	dir := t.TempDir()
	text := stateConfig(dir)
	clk := fixedClock()
	a, _ := newStateServer(t, text, clk)
	a.tr.Disable(a.pool.Lookup("bob@127.0.0.1:2").Record(), "maintenance")
	a.startStateFile()
	a.stopStateFile()
	path := a.cfg.Load().StateFile
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	bad := 0
	for i, l := range lines {
		if strings.Contains(l, `"name":"dc-1"`) {
			lines[i] = strings.Replace(l, `"state":"eligible"`, `"state":"bogus"`, 1)
			bad = i + 1
		}
	}
	// And a removed record with no removed_at, after the records.
	doc := strings.Replace(strings.Join(lines, "\n"), "\n  ]\n}", "\n  ],\n  \"removed\": [\n    {\"key\":\"socks5://gone@127.0.0.1:9\",\"state\":\"disabled\"}\n  ]\n}", 1)
	if bad == 0 || !strings.Contains(doc, "bogus") || !strings.Contains(doc, "gone@") {
		t.Fatalf("could not edit the state file:\n%s", data)
	}
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	removedLine := 1 + strings.Count(doc[:strings.Index(doc, "gone@")], "\n")

	b, logs := newStateServer(t, text, clk)
	b.startStateFile()
	t.Cleanup(b.stopStateFile)
	if bob := snapOf(t, b, "bob@127.0.0.1:2"); bob.State != health.Disabled || bob.Reason != health.Operator {
		t.Errorf("bob after a restart beside a bad record: %v %v, want disabled operator (restored)", bob.State, bob.Reason)
	}
	if asides, _ := filepath.Glob(path + ".corrupt-*"); len(asides) != 0 {
		t.Errorf("the file was set aside for one bad record: %v", asides)
	}
	var skips []map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "state file record skipped: it cannot be read; the others are restored" {
			skips = append(skips, m)
		}
	}
	if len(skips) != 2 {
		t.Fatalf("%d skipped records logged, want 2:\n%s", len(skips), logs.String())
	}
	for i, want := range []struct {
		line    int
		key     string
		removed bool
		err     string
	}{{bad, "socks5://alice@127.0.0.1:1", false, "bogus"}, {removedLine, "socks5://gone@127.0.0.1:9", true, "removed_at"}} {
		m := skips[i]
		if m["level"] != "warn" || m["line"] != float64(want.line) || m["key"] != want.key || m["removed"] != want.removed || !strings.Contains(fmt.Sprint(m["error"]), want.err) {
			t.Errorf("skip %d logged as %v; want line %d, key %s, removed %v, err about %s", i, m, want.line, want.key, want.removed, want.err)
		}
	}
	if !strings.Contains(logs.String(), `"restored":1`) || !strings.Contains(logs.String(), `"skipped":2`) {
		t.Errorf("restore not logged with its counts: %s", logs.String())
	}
}

// TestStateFileStartAddedLinesSayRestoredState: at start the "upstream
// added" lines come once the state file is restored and give the state
// each upstream starts in. Bug: they came before the restore, so a cooling
// upstream read "added to=probe_allowed", then "restored: cooling".
func TestStateFileStartAddedLinesSayRestoredState(t *testing.T) {
	dir := t.TempDir()
	text := stateConfig(dir)
	clk := fixedClock()
	a, _ := newStateServer(t, text, clk)
	a.pool.Report(a.pool.Lookup("dc-1"), &health.Failure{Class: health.Refused, Stage: health.StageDial})
	a.startStateFile()
	a.stopStateFile()

	clk.Advance(time.Second)
	b, logs := newStateServer(t, text, clk)
	if out := logs.String(); strings.Contains(out, `"message":"upstream added"`) {
		t.Errorf("added lines before the state file is read:\n%s", out)
	}
	b.startStateFile()
	t.Cleanup(b.stopStateFile)
	out := logs.String()
	added := strings.Index(out, `{"level":"info","upstream":"dc-1","to":"cooling","message":"upstream added"}`)
	restored := strings.Index(out, `"message":"state file restored"`)
	if added < 0 || restored < 0 || added < restored || strings.Contains(out, `"upstream":"dc-1","to":"probe_allowed"`) {
		t.Errorf("want dc-1 added to=cooling after the state file's line:\n%s", out)
	}
	if strings.Count(out, `"message":"upstream added"`) != 2 {
		t.Errorf("want one added line per upstream:\n%s", out)
	}
}
