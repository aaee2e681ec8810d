package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb, noSignals)
	return code, out.String(), errb.String()
}

// noSignals is a notifyFunc for runs that must not serve.
func noSignals(chan<- os.Signal, ...os.Signal) {}

func TestVersion(t *testing.T) {
	code, out, _ := runCmd(t, "-version")
	if code != 0 || !strings.HasPrefix(out, "rotor ") {
		t.Fatalf("-version: %d %q", code, out)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.toml", "[[upstream]]\nurl = \"socks5://u:p@127.0.0.1:1080\"\n")
	bad := write("bad.toml", "[pool]\nmax_attempts = 3\nwait_for_upstrem = \"10s\"\n\n[[upstream]]\nurl = \"ftp://u:secret-pw@127.0.0.1:21\"\n")
	list := write("proxies.txt", "127.0.0.1:3128\nnot a proxy line\n")
	withList := write("list.toml", "[[upstream_file]]\npath = \""+filepath.Base(list)+"\"\n")
	empty := write("empty.txt", "# nothing yet\n")
	withEmpty := write("empty.toml", "[[upstream]]\nurl = \"socks5://127.0.0.1:1080\"\n[[upstream_file]]\npath = \"empty.txt\"\n")

	cases := []struct {
		name  string
		path  string
		code  int
		wants []string
	}{
		{"valid", good, 0, []string{"ok"}},
		{"unknown key and bad scheme", bad, 1, []string{bad + ":3: unknown key \"pool.wait_for_upstrem\"", bad + ":6: "}},
		{"bad list line", withList, 1, []string{list + ":2: "}},
		// At the line of its path (bug: "empty.txt: no upstreams…", no line).
		{"empty list", withEmpty, 1, []string{withEmpty + ":4: upstream_file " + empty + ": no upstreams in this list file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runCmd(t, "-config", tc.path, "-check")
			if code != tc.code {
				t.Fatalf("exit %d, want %d (stdout %q stderr %q)", code, tc.code, out, errs)
			}
			for _, w := range tc.wants {
				if !strings.Contains(out+errs, w) {
					t.Errorf("output lacks %q:\n%s%s", w, out, errs)
				}
			}
			if strings.Contains(out+errs, "secret-pw") {
				t.Error("-check echoed a password")
			}
			// None of these configs sets [probe] url: a valid one says
			// what that means.
			if warned := strings.Contains(errs, "warning: no [probe] url"); warned != (tc.code == 0) {
				t.Errorf("probe warning printed %v for exit %d: %q", warned, tc.code, errs)
			}
		})
	}
}

// TestCheckProbeWarning: with [probe] url set, -check prints no warning.
func TestCheckProbeWarning(t *testing.T) {
	p := filepath.Join(t.TempDir(), "probe.toml")
	text := "[probe]\nurl = \"http://127.0.0.1:9/\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:1080\"\n"
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runCmd(t, "-config", p, "-check"); code != 0 || errs != "" || !strings.Contains(out, "ok") {
		t.Fatalf("-check: exit %d stdout %q stderr %q, want ok and nothing on stderr", code, out, errs)
	}
}

// TestCheckWarnsPrivateProbeBehindDirect: a probe.url on loopback that
// the direct upstream may not reach (allow_private_destinations = false)
// would keep it out for good: -check says so, and exits 0 (the file is
// valid). Issue: -check printed ok and the upstream never served.
func TestCheckWarnsPrivateProbeBehindDirect(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		text string
		warn bool
	}{
		"loopback behind direct":  {"[probe]\nurl = \"http://127.0.0.1:9/\"\n[[upstream]]\nurl = \"direct://\"\n", true},
		"localhost behind direct": {"[probe]\nurl = \"http://localhost:9/\"\n[[upstream]]\nurl = \"direct://\"\n", true},
		"allowed":                 {"allow_private_destinations = true\n[probe]\nurl = \"http://127.0.0.1:9/\"\n[[upstream]]\nurl = \"direct://\"\n", false},
		"no direct":               {"[probe]\nurl = \"http://127.0.0.1:9/\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:1080\"\n", false},
		"public probe":            {"[probe]\nurl = \"http://probe.example/\"\n[[upstream]]\nurl = \"direct://\"\n", false},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".toml")
		if err := os.WriteFile(p, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		code, _, errs := runCmd(t, "-config", p, "-check")
		if code != 0 || strings.Contains(errs, "never serve") != tc.warn {
			t.Errorf("%s: exit %d stderr %q, want exit 0 and the warning %v", name, code, errs, tc.warn)
		}
	}
}

func TestBadFlags(t *testing.T) {
	// A bad value is a usage error with -version too (bug: -log-level
	// bogus -version printed the version and exited 0).
	for _, args := range [][]string{{"-log-level", "bogus", "-version"}, {"-version", "-log-level", "bogus"}, {"-log-format", "xml", "-version"}} {
		if code, out, errs := runCmd(t, args...); code != 2 || out != "" || !strings.Contains(errs, "must be") {
			t.Errorf("%q: exit %d stdout %q stderr %q, want 2 and the flag's error", args, code, out, errs)
		}
	}
	if code, out, _ := runCmd(t, "-log-level", "debug", "-log-format", "console", "-version"); code != 0 || !strings.HasPrefix(out, "rotor ") {
		t.Errorf("good values with -version: exit %d %q", code, out)
	}
	if code, _, errs := runCmd(t, "-log-format", "xml", "-config", "/nonexistent.toml"); code == 0 || !strings.Contains(errs, "log-format") {
		t.Fatalf("bad -log-format: exit %d %q", code, errs)
	}
	for _, bad := range []string{"loud", "", "trace", "fatal", "panic", "disabled"} {
		if code, _, errs := runCmd(t, "-log-level", bad, "-config", "/nonexistent.toml"); code != 2 || !strings.Contains(errs, "-log-level must be debug, info, warn or error") {
			t.Errorf("-log-level %q: exit %d %q", bad, code, errs)
		}
	}
}

// TestConsoleLogNoColorInFiles: -log-format console writes no ANSI colour
// codes when stderr is a file (log files, journald, docker logs). Issue:
// every line carried escape codes such as ESC[90m.
func TestConsoleLogNoColorInFiles(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "rotor.toml")
	text := "[listen]\nsocks5 = \"" + busy.Addr().String() + "\"\nhttp = \"\"\nadmin = \"\"\n[[upstream]]\nurl = \"direct://\"\n"
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if code := run([]string{"-config", cfg, "-log-format", "console"}, &out, f, noSignals); code != 1 {
		t.Fatalf("exit %d with its port taken, want 1", code)
	}
	logged, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(logged), "start failed") {
		t.Fatalf("no start failure logged: %q", logged)
	}
	if strings.Contains(string(logged), "\x1b[") {
		t.Errorf("console log in a file has colour codes: %q", logged)
	}
}

// TestDanglingLocalConfig: a ./rotor.toml symlink to nothing was taken for
// no config at all, and rotor served on the built-in defaults (which let
// the direct upstream reach private addresses); -check said "built-in
// defaults: ok". Only a ./rotor.toml that does not exist means defaults.
func TestDanglingLocalConfig(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if code, out, _ := runCmd(t, "-check"); code != 0 || !strings.Contains(out, "built-in defaults: ok") {
		t.Fatalf("no ./rotor.toml: exit %d %q, want the defaults", code, out)
	}
	for _, target := range []string{filepath.Join(dir, "nonexistent.toml"), "rotor.toml"} { // a dangling symlink, a loop
		if err := os.Remove("rotor.toml"); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if err := os.Symlink(target, "rotor.toml"); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"-check"}, {}, {"-healthcheck"}} {
			// Serving (no flags) must not start; if it does, it stops at once.
			var out, errb bytes.Buffer
			code := run(args, &out, &errb, stopAtOnce)
			errs := errb.String()
			if code != 1 || !strings.Contains(errs, "rotor.toml is a symlink to "+target) || strings.Contains(out.String(), "ok") {
				t.Errorf("rotor %v with ./rotor.toml -> %s: exit %d, stdout %q, stderr %q; want exit 1 naming the file", args, target, code, out.String(), errs)
			}
		}
	}
}

// stopAtOnce is a notifyFunc that delivers a SIGTERM at once.
func stopAtOnce(c chan<- os.Signal, _ ...os.Signal) {
	go func() { c <- syscall.SIGTERM }() // owner: the run; ends once delivered (c is buffered)
}

// TestCheckAndHealthcheckTogether: -check -healthcheck ran the healthcheck
// alone, silently; it is a usage error.
func TestCheckAndHealthcheckTogether(t *testing.T) {
	code, _, errs := runCmd(t, "-check", "-healthcheck")
	if code != 2 || !strings.Contains(errs, "-check and -healthcheck") {
		t.Errorf("exit %d, stderr %q; want 2 and a usage error", code, errs)
	}
}

// TestCheckDefaultsProbeWarning: `rotor -check` on the built-in defaults
// (no [probe] url either) prints the same no-probe warning a config file
// without [probe] gets (bug: it printed only "built-in defaults: ok").
func TestCheckDefaultsProbeWarning(t *testing.T) {
	t.Chdir(t.TempDir())
	code, out, errs := runCmd(t, "-check")
	if code != 0 || out != "built-in defaults: ok\n" {
		t.Fatalf("-check on the defaults: exit %d stdout %q, want 0 and ok", code, out)
	}
	const want = "built-in defaults: warning: no [probe] url: cooled upstreams are re-admitted when their cooldown ends, and new ones serve, without a probe\n"
	if errs != want {
		t.Errorf("stderr %q, want %q", errs, want)
	}
}
