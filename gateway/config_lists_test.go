package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		a + ":3: duplicate upstream socks5://127.0.0.1:2001",
		a + ":4: missing port",
		a + ":5: duplicate upstream socks5://127.0.0.1:1080",
		a + ":6: invalid port \"0\"",
		empty + ": " + emptyListMsg,
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
