package gateway

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// writeFiles writes name → text under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckConfigReportsEverything: -check (CheckConfig) reports the
// config's errors, every unreadable list file at the line of its path,
// and every list file's skipped lines in line order, in one run (bugs: a
// config error hid the list files' problems, a missing list file hid
// every other list's, and a duplicate on line 12 came after line 14).
func TestCheckConfigReportsEverything(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"rotor.toml": strings.Join([]string{
			"[pool]",
			"max_attempts = \"three\"", // 2
			"[[upstream]]",
			"url = \"socks5://127.0.0.1:1080\"",
			"[[upstream_file]]",
			"path = \"missing.txt\"", // 6
			"[[upstream_file]]",
			"path = \"a.txt\"",
			"scheme = \"socks5\"",
			"[[upstream_file]]",
			"path = \"also-missing.txt\"", // 11
			"[[upstream_file]]",
			"path = \"empty.txt\"",
		}, "\n") + "\n",
		"a.txt": strings.Join([]string{
			"# line 1",
			"127.0.0.1:2001",
			"127.0.0.1:2001",           // 3: duplicate (found after parsing)
			"not a proxy",              // 4: does not parse
			"127.0.0.1:1080",           // 5: duplicate of the [[upstream]]
			"127.0.0.1:0",              // 6: does not parse
			"127.0.0.1:2002   # dc-2",  // 7: fine
			"127.0.0.1:2003:u:Pw#9  #", // 8: fine
		}, "\n") + "\n",
		"empty.txt": "# nothing yet\n",
	})
	path := filepath.Join(dir, "rotor.toml")
	a, empty := filepath.Join(dir, "a.txt"), filepath.Join(dir, "empty.txt")
	err := CheckConfig(path)
	if err == nil {
		t.Fatal("CheckConfig found nothing")
	}
	want := []string{
		path + ":2: pool.max_attempts: want an integer, got a string",
		path + ":6: upstream_file: open " + filepath.Join(dir, "missing.txt") + ": no such file or directory",
		path + ":11: upstream_file: open " + filepath.Join(dir, "also-missing.txt") + ": no such file or directory",
		path + ":13: upstream_file " + empty + ": " + emptyListMsg, // bug: "empty.txt: no upstreams…", no line
		a + ":3: upstream socks5://127.0.0.1:2001 duplicates the one at line 2 (that one is kept; this line is skipped)",
		a + ":4: missing port",
		a + ":5: upstream socks5://127.0.0.1:1080 duplicates the one at " + path + ":4 (that one is kept; this line is skipped)",
		a + ":6: invalid port \"0\"",
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}

	// A start refuses the unreadable files, every one of them, at their
	// lines; the skipped lines are only warnings.
	fixed := strings.Replace(mustRead(t, path), "\"three\"", "3", 1)
	writeFiles(t, dir, map[string]string{"rotor.toml": fixed})
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, serr := cfg.specs()
	wantStart := path + ":6: upstream_file: open " + filepath.Join(dir, "missing.txt") + ": no such file or directory\n" +
		path + ":11: upstream_file: open " + filepath.Join(dir, "also-missing.txt") + ": no such file or directory"
	if serr == nil || serr.Error() != wantStart {
		t.Errorf("specs: %v\nwant %s", serr, wantStart)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestUpstreamNameIsAnotherDefault: an [[upstream]] named "127.0.0.1:8"
// next to an unnamed one whose default name is "127.0.0.1:8" passed
// -check; the API then listed the named one as 127.0.0.1:8 and the other
// as 127.0.0.1:8#2, so disabling "127.0.0.1:8" disabled the wrong proxy,
// and curl cut "#2" off as a fragment. Such a name is now an error of the
// config (of -check, a start and a reload); a list line it would clash
// with is skipped; unnamed upstreams of one host:port still get distinct
// names (user@host:port, and a ~N suffix URLs carry as is).
func TestUpstreamNameIsAnotherDefault(t *testing.T) {
	t.Run("[[upstream]]", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"rotor.toml": strings.Join([]string{
			"[[upstream]]",
			"url = \"http://127.0.0.1:7\"",
			"name = \"127.0.0.1:8\"", // 3
			"[[upstream]]",
			"url = \"http://127.0.0.1:8\"", // 5
		}, "\n") + "\n"})
		path := filepath.Join(dir, "rotor.toml")
		want := path + ":3: upstream name \"127.0.0.1:8\" duplicates the one at line 5 (the default name of that unnamed upstream): name one of them otherwise"
		if err := CheckConfig(path); err == nil || err.Error() != want {
			t.Errorf("CheckConfig: %v\nwant %s", err, want)
		}
		cfg, err := LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := New(cfg, Options{Log: zerolog.Nop()}); err == nil || err.Error() != want {
			t.Errorf("New: %v\nwant %s", err, want)
		}
	})
	t.Run("list line", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			"rotor.toml": "[[upstream]]\nurl = \"http://127.0.0.1:7\"\nname = \"127.0.0.1:8\"\n[[upstream_file]]\npath = \"list.txt\"\n",
			"list.txt":   "127.0.0.1:9\n127.0.0.1:8\n",
		})
		path, list := filepath.Join(dir, "rotor.toml"), filepath.Join(dir, "list.txt")
		want := list + ":2: upstream http://127.0.0.1:8 would be named \"127.0.0.1:8\", which is the name of the [[upstream]] at " + path + ":3 (rename that one)"
		if err := CheckConfig(path); err == nil || err.Error() != want {
			t.Errorf("CheckConfig: %v\nwant %s", err, want)
		}
		cfg, err := LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		specs, lists, problems, err := cfg.specs()
		if err != nil || len(problems) != 1 || problems[0].Error() != want {
			t.Fatalf("specs: %v, problems %v\nwant the problem %s", err, problems, want)
		}
		var names []string
		for _, s := range specs {
			names = append(names, s.Name)
		}
		if strings.Join(names, " ") != "127.0.0.1:8 127.0.0.1:9" || len(lists) != 1 || lists[0].N != 1 {
			t.Errorf("specs named %v, list count %v; want [127.0.0.1:8 127.0.0.1:9] and 1", names, lists)
		}
	})
	t.Run("unnamed ones of one host:port", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{
			// A gateway named after its host:port, and a session-in-username
			// list on it: the lines are user@host:port, no clash.
			"rotor.toml": "[[upstream]]\nurl = \"http://127.0.0.1:7000\"\nname = \"127.0.0.1:7000\"\n[[upstream_file]]\npath = \"list.txt\"\n" +
				"[[upstream]]\nurl = \"http://127.0.0.1:9\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:9\"\n",
			"list.txt": "127.0.0.1:7000:user-session-1:pw\n127.0.0.1:7000:user-session-2:pw\n",
		})
		path := filepath.Join(dir, "rotor.toml")
		if err := CheckConfig(path); err != nil {
			t.Fatalf("CheckConfig: %v", err)
		}
		cfg, err := LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(cfg, Options{Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"127.0.0.1:7000", "user-session-1@127.0.0.1:7000", "user-session-2@127.0.0.1:7000", "127.0.0.1:9", "127.0.0.1:9~2"} {
			if srv.Pool().Lookup(name) == nil {
				t.Errorf("no upstream named %q", name)
			}
		}
		// The suffixed name goes into the admin API's path as it is.
		ts := httptest.NewServer(srv.adminHandler())
		defer ts.Close()
		resp, err := http.Get(ts.URL + "/api/upstreams/127.0.0.1:9~2")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET /api/upstreams/127.0.0.1:9~2: %d, want 200", resp.StatusCode)
		}
	})
}

// TestListDuplicateNamesTheOther: a duplicate list line names the line it
// duplicates, in its own file, in another list or in the config (bug: it
// said "duplicate upstream …" and left the reader to search for it).
func TestListDuplicateNamesTheOther(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"rotor.toml": "[[upstream]]\nurl = \"http://127.0.0.1:2001\"\n" +
			"[[upstream_file]]\npath = \"a.txt\"\n[[upstream_file]]\npath = \"b.txt\"\n",
		"a.txt": "# first\n127.0.0.1:2002\n127.0.0.1:2003\n127.0.0.1:2002\n",
		"b.txt": "127.0.0.1:2003\n127.0.0.1:2001\n127.0.0.1:2004\n",
	})
	path, a, b := filepath.Join(dir, "rotor.toml"), filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	want := strings.Join([]string{
		a + ":4: upstream http://127.0.0.1:2002 duplicates the one at line 2 (that one is kept; this line is skipped)",
		b + ":1: upstream http://127.0.0.1:2003 duplicates the one at " + a + ":3 (that one is kept; this line is skipped)",
		b + ":2: upstream http://127.0.0.1:2001 duplicates the one at " + path + ":2 (that one is kept; this line is skipped)",
	}, "\n")
	if err := CheckConfig(path); err == nil || err.Error() != want {
		t.Errorf("got:\n%v\nwant:\n%s", err, want)
	}
}
