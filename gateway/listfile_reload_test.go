package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestEmptyListFileKeepsRunningList: a list file that served upstreams and
// is then found empty (truncated, comments only, every line bad) is a
// refused reload: the pool, the records and an operator's disable stay.
// A list that is empty from the start only warns, and -check reports it.
func TestEmptyListFileKeepsRunningList(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	a := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	b := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.toml")
	list := filepath.Join(dir, "proxies.txt")
	other := filepath.Join(dir, "later.txt")
	write := func(p, text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(list, a.Addr()+"\n"+b.Addr()+"\n")
	write(other, "# filled later\n")
	text := fmt.Sprintf("[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n%s\n"+
		"[[upstream_file]]\npath = \"proxies.txt\"\nscheme = \"socks5\"\n"+
		"[[upstream_file]]\npath = \"later.txt\"\nscheme = \"socks5\"\n", probeConf(target))
	write(path, text)
	// Errors about a list as a whole are at the line of its path in the
	// config (bug: they named the list file and no line).
	listAt := fmt.Sprintf("%s:%d: upstream_file %s: ", path, lineOf(t, text, `path = "proxies.txt"`), list)
	otherAt := fmt.Sprintf("%s:%d: upstream_file %s: ", path, lineOf(t, text, `path = "later.txt"`), other)

	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	var ce ConfigErrors
	if err := cfg.CheckLists(); !errors.As(err, &ce) || len(ce) != 1 || ce[0].Error() != otherAt+emptyListMsg {
		t.Errorf("-check on a config with an empty list file: %v, want %s", err, otherAt+emptyListMsg)
	}
	logs := &logBuffer{}
	srv, err := New(cfg, Options{Log: zerolog.New(logs)})
	if err != nil {
		t.Fatalf("an empty list file at start must only warn: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(t.Context()) })
	if !strings.Contains(logs.String(), otherAt) || !strings.Contains(logs.String(), `"level":"warn"`) {
		t.Errorf("the empty list at start was not warned about: %s", logs.String())
	}
	if n := len(srv.Pool().Endpoints()); n != 2 {
		t.Fatalf("%d upstreams at start, want 2", n)
	}
	srv.Tracker().Disable(srv.Pool().Lookup(a.Addr()).Record(), "bad exit IPs")

	for _, tc := range []struct{ name, text string }{
		{"truncated", ""},
		{"comments only", "# regenerating…\n"},
		{"no usable line", "not a proxy\nsocks5://:0\n"},
	} {
		write(list, tc.text)
		err := srv.ReloadFile()
		if err == nil || !strings.HasPrefix(err.Error(), listAt+emptyListMsg) || !strings.Contains(err.Error(), "gave 2 upstreams") {
			t.Errorf("%s list: reload error %v, want a refusal at %s", tc.name, err, listAt)
		}
		if n := len(srv.Pool().Endpoints()); n != 2 {
			t.Fatalf("%s list: %d upstreams after the refused reload, want 2", tc.name, n)
		}
		if st := srv.Tracker().Snapshot(srv.Pool().Lookup(a.Addr()).Record()); st.State != health.Disabled {
			t.Fatalf("%s list: the operator's disable was lost: %v", tc.name, st.State)
		}
	}

	// A real edit still applies, and the list that was empty may stay so.
	write(list, b.Addr()+"\n")
	if err := srv.ReloadFile(); err != nil {
		t.Fatalf("a list with one upstream left: %v", err)
	}
	if srv.Pool().Lookup(a.Addr()) != nil || srv.Pool().Lookup(b.Addr()) == nil {
		t.Error("removing a from the list did not apply")
	}
}

// lineOf is the 1-based line of text holding sub.
func lineOf(t *testing.T, text, sub string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			return i + 1
		}
	}
	t.Fatalf("no line holds %q", sub)
	return 0
}
