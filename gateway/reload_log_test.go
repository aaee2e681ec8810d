package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// reloadLogLine is what TestReloadRejectedOneErrorAsMany reads of a log
// line.
type reloadLogLine struct {
	Level   string `json:"level"`
	Err     string `json:"error"`
	Errors  *int   `json:"errors"`
	Message string `json:"message"`
}

// rejectedReloadLines returns the "config error" and "reload rejected"
// lines of logs, in order.
func rejectedReloadLines(t *testing.T, logs string) []reloadLogLine {
	t.Helper()
	var got []reloadLogLine
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		var ev reloadLogLine
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if ev.Message == "config error" || strings.HasPrefix(ev.Message, "reload rejected") {
			got = append(got, ev)
		}
	}
	return got
}

// TestReloadRejectedOneErrorAsMany: a reload rejected for one problem is
// logged as one for several is: a "config error" line with FILE:LINE,
// then "reload rejected" with the count (bug: one problem was logged as
// the rejection line's error, with no "config error" line and no count,
// unlike README's "one config error line per problem, then reload
// rejected with their count").
func TestReloadRejectedOneErrorAsMany(t *testing.T) {
	path, logs := rejectReload(t, "bogus_key = 1\n")
	got := rejectedReloadLines(t, logs.String())
	if len(got) != 2 {
		t.Fatalf("%d lines about the rejected reload, want a config error line and the rejection; log:\n%s", len(got), logs)
	}
	wantErr := path + `:7: unknown key "upstream.bogus_key"`
	if c := got[0]; c.Message != "config error" || c.Level != "error" || c.Err != wantErr || c.Errors != nil {
		t.Errorf("first line %+v, want config error at error with error %q", c, wantErr)
	}
	if r := got[1]; r.Message != "reload rejected: keeping the running config" || r.Level != "error" || r.Errors == nil || *r.Errors != 1 || r.Err != "" {
		t.Errorf("second line %+v, want the rejection with errors 1 and no error of its own", r)
	}
}

// rejectReload runs a watched gateway on a minimal config (direct://,
// SOCKS5 only), appends extra to its file, sends SIGHUP and returns the
// file's path and the log once the rejected reload is logged.
func rejectReload(t *testing.T, extra string) (string, *logBuffer) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rotor.toml")
	head := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[[upstream]]\nurl = \"direct://\"\n"
	if err := os.WriteFile(path, []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, hup := watchedFile(t, path, true)
	if err := os.WriteFile(path, []byte(head+extra), 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	eventuallyTrue(t, "the rejected reload logged", func() bool { return strings.Contains(logs.String(), "reload rejected") })
	return path, logs
}
