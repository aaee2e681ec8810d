package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestListFileIsADirectory: an [[upstream_file]] path that is a
// directory is one error at the line of its path saying so, from -check,
// a start and a reload alike (bug: os.Open succeeds on a directory, so
// -check reported a bad line 1 of the directory ("read: … is a
// directory") and a list with no upstreams, and a start only warned).
func TestListFileIsADirectory(t *testing.T) {
	dir := t.TempDir()
	list := filepath.Join(dir, "proxies")
	if err := os.Mkdir(list, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rotor.toml")
	text := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n" +
		"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
		"[[upstream_file]]\npath = \"proxies\"\n"
	writeFiles(t, dir, map[string]string{"rotor.toml": text})
	want := path + ":9: upstream_file: " + list + " is a directory, not a list file"

	if err := CheckConfig(path); err == nil || err.Error() != want {
		t.Errorf("-check: %v\nwant %s", err, want)
	}
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	if _, err := New(cfg, Options{Log: zerolog.New(logs)}); err == nil || err.Error() != want {
		t.Errorf("start: %v\nwant %s", err, want)
	}
	if strings.Contains(logs.String(), "upstream list line skipped") {
		t.Errorf("the directory was read as a list with a bad line:\n%s", logs)
	}

	// A reload onto a directory is refused with that error; the pool stays.
	writeFiles(t, dir, map[string]string{"proxies.txt": "127.0.0.1:2001\n"})
	srv, logs := newGateway(t, path, strings.Replace(text, "path = \"proxies\"", "path = \"proxies.txt\"", 1))
	if srv.Pool().Lookup("127.0.0.1:2001") == nil {
		t.Fatal("the list file's upstream is not in the pool")
	}
	writeFiles(t, dir, map[string]string{"rotor.toml": text})
	if err := srv.ReloadFile(); err == nil || err.Error() != want {
		t.Errorf("reload: %v\nwant %s", err, want)
	}
	if srv.Pool().Lookup("127.0.0.1:2001") == nil || srv.Pool().Lookup("direct") == nil {
		t.Error("a refused reload changed the pool")
	}
	if strings.Contains(logs.String(), "upstream list line skipped") {
		t.Errorf("the directory was read as a list with a bad line:\n%s", logs)
	}
}
