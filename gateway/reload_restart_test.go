package gateway

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestReloadRestartNoticeAgainstRunning: a restart-only key is compared
// with the running value, the one the server started with (bug: with the
// last reloaded file, so a change undone by the next reload was reported
// again as taking effect after a restart, though the file matched what
// ran). Each key: change it (one notice), restore it (none), change it
// again (a second notice).
func TestReloadRestartNoticeAgainstRunning(t *testing.T) {
	dir := t.TempDir()
	ca := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{TLS: true}).CertPEM()
	for _, n := range []string{"a.pem", "b.pem"} {
		if err := os.WriteFile(filepath.Join(dir, n), ca, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	type vals struct {
		instance, socks, ca, state string
		max                        int
	}
	conf := func(v vals) string {
		return fmt.Sprintf("upstream_ca_file = %q\nstate_file = %q\n[listen]\nsocks5 = %q\nhttp = \"\"\nadmin = \"\"\nmax_connections = %d\n"+
			"[cluster]\nredis = \"redis://127.0.0.1:1/0\"\ninstance = %q\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n",
			v.ca, v.state, v.socks, v.max, v.instance)
	}
	base := vals{"a", "127.0.0.1:0", filepath.Join(dir, "a.pem"), filepath.Join(dir, "a.json"), 100}
	for _, tc := range []struct {
		notice string
		change func(*vals)
	}{
		{"[cluster] changed", func(v *vals) { v.instance = "b" }},
		{"listener address changed", func(v *vals) { v.socks = "127.0.0.1:1" }},
		{"max_connections_per_ip changed", func(v *vals) { v.max = 200 }},
		{"upstream_ca_file changed", func(v *vals) { v.ca = filepath.Join(dir, "b.pem") }},
		{"state_file changed", func(v *vals) { v.state = filepath.Join(dir, "b.json") }},
	} {
		t.Run(tc.notice, func(t *testing.T) {
			srv, logs := newGateway(t, "restart.toml", conf(base)) // not started: the fleet never dials Redis
			changed := base
			tc.change(&changed)
			for i, step := range []struct {
				v    vals
				want int
			}{{changed, 1}, {base, 1}, {base, 1}, {changed, 2}} {
				next, err := ParseConfig("restart.toml", []byte(conf(step.v)))
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.Reload(next); err != nil {
					t.Fatal(err)
				}
				if got := strings.Count(logs.String(), tc.notice); got != step.want {
					t.Fatalf("after reload %d: %d notices %q, want %d; logs:\n%s", i+1, got, tc.notice, step.want, logs.String())
				}
			}
		})
	}
}

// TestReloadNoticesSayWhatChanged: the restart notice names each
// listener that moved, with its running and its new address (bug: "listener
// addresses changed", not which), and "health config updated" is logged
// only by a reload that changes the health settings (bug: by every one).
func TestReloadNoticesSayWhatChanged(t *testing.T) {
	conf := func(socks, admin, base string) string {
		return fmt.Sprintf("[listen]\nsocks5 = %q\nhttp = \"\"\nadmin = %q\n[cooldown.refused]\nbase = %q\n"+
			"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n", socks, admin, base)
	}
	srv, logs := newGateway(t, "notice.toml", conf("127.0.0.1:0", "", "30s")) // not started
	lines := func() []map[string]any {
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("log line %q: %v", l, err)
			}
			out = append(out, m)
		}
		return out
	}
	reload := func(text string) (moved []string, healthUpdates int) {
		t.Helper()
		before := len(lines())
		next, err := ParseConfig("notice.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Reload(next); err != nil {
			t.Fatal(err)
		}
		for _, m := range lines()[before:] {
			switch m["message"] {
			case "reload: listener address changed; it takes effect after a restart":
				moved = append(moved, fmt.Sprintf("%v %v→%v", m["listener"], m["from"], m["to"]))
			case "health config updated":
				healthUpdates++
			}
		}
		return moved, healthUpdates
	}

	if moved, n := reload(conf("127.0.0.1:0", "", "30s")); len(moved) != 0 || n != 0 {
		t.Errorf("unchanged file: notices %q, %d health updates; want none", moved, n)
	}
	if moved, n := reload(conf("127.0.0.1:1", "127.0.0.1:2", "30s")); strings.Join(moved, ", ") != "socks5 127.0.0.1:0→127.0.0.1:1, admin →127.0.0.1:2" || n != 0 {
		t.Errorf("two listeners moved: notices %q, %d health updates; want socks5 and admin named, no health update", moved, n)
	}
	if moved, n := reload(conf("127.0.0.1:0", "", "45s")); len(moved) != 0 || n != 1 {
		t.Errorf("cooldown changed: notices %q, %d health updates; want no notice, one update", moved, n)
	}
	if got := srv.Tracker().Policy().Cooldown(health.Refused, 1, 0.5); got != 45*time.Second {
		t.Errorf("after the cooldown change the policy gives %v, want 45s", got)
	}
	if _, n := reload(conf("127.0.0.1:0", "", "45s")); n != 0 {
		t.Errorf("the same file again: %d health updates, want none", n)
	}
}

// TestReloadCannotExposeRunningListeners: listeners keep their start-up
// addresses until a restart, so a reload is checked against those (bug: it
// was checked against the file's, and a file that moved the fronts to
// loopback while dropping the [[client]] or the admin_token left the
// running 0.0.0.0 listeners open to anyone, without allow_open). A reload
// that opens them under allow_open logs the OPEN PROXY warning, as a start does.
func TestReloadCannotExposeRunningListeners(t *testing.T) {
	const direct = "[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n"
	const client = "[[client]]\nusername = \"u\"\npassword = \"p\"\n"
	wide := "[listen]\nsocks5 = \"0.0.0.0:0\"\nhttp = \"\"\nadmin = \"0.0.0.0:0\"\nadmin_token = \"tok\"\n"
	local := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"127.0.0.1:0\"\n"
	for _, tc := range []struct {
		name, boot, next, refused string
	}{
		{"clients dropped", wide + client + direct, local + "admin_token = \"tok\"\n" + direct, "refusing to make the running listeners an open proxy: 0.0.0.0:0"},
		{"admin token dropped", wide + client + direct, local + client + direct, "refusing to reload: listen.admin 0.0.0.0:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := newGateway(t, "expose.toml", tc.boot)
			next, err := ParseConfig("expose.toml", []byte(tc.next))
			if err != nil {
				t.Fatal(err)
			}
			err = srv.Reload(next)
			if err == nil || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("reload: %v, want %q", err, tc.refused)
			}
			if got := srv.Config(); len(got.Clients) != 1 || got.Listen.AdminToken != "tok" {
				t.Fatalf("refused reload changed the running config: %d clients, token %q", len(got.Clients), got.Listen.AdminToken)
			}
		})
	}
	t.Run("allow_open warned", func(t *testing.T) {
		srv, logs := newGateway(t, "expose.toml", wide+"allow_open = true\n"+client+direct)
		next, err := ParseConfig("expose.toml", []byte(wide+"allow_open = true\n"+direct))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Reload(next); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(logs.String(), "OPEN PROXY") {
			t.Fatalf("no OPEN PROXY warning after a reload dropped the last client; logs:\n%s", logs.String())
		}
	})
}
