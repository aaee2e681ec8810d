package gateway

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReloadLogsWarnings: a reload logs each of the new config's warnings
// (what -check prints as FILE: warning: …) at warn, as a start does (bug:
// they were logged at start only, so a reload bringing in a probe.url the
// direct upstream may not reach said nothing).
func TestReloadLogsWarnings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rotor.toml")
	head := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[[upstream]]\nurl = \"direct://\"\n"
	if err := os.WriteFile(path, []byte(head), 0o600); err != nil {
		t.Fatal(err)
	}
	_, logs, hup := watchedFile(t, path, true)
	next := head + "[probe]\nurl = \"http://127.0.0.1:9/\"\n"
	cfg, err := ParseConfig(path, []byte(next))
	if err != nil {
		t.Fatal(err)
	}
	want := cfg.Warnings()
	if len(want) != 1 {
		t.Fatalf("the new config has warnings %q, want one", want)
	}
	if err := os.WriteFile(path, []byte(next), 0o600); err != nil {
		t.Fatal(err)
	}
	hup <- syscall.SIGHUP
	eventuallyTrue(t, "the warning logged", func() bool { return strings.Contains(logs.String(), "its probes will fail") })
	var found bool
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var ev struct{ Level, Message, Config string }
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if ev.Message == want[0] {
			found = true
			if ev.Level != "warn" || ev.Config != path {
				t.Errorf("warning logged as %+v, want level warn and config %s", ev, path)
			}
		}
	}
	if !found {
		t.Errorf("no line with message %q in:\n%s", want[0], logs)
	}
}
