package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestSOCKS5CredentialsRFC1929Checked: socks5 credentials that RFC 1929
// cannot carry (an empty username, a password or username over 255
// bytes) passed -check, and then the pool refused the whole config: a
// start exited 1 with no FILE:LINE, and a reload that added such a list
// line and a good one was rejected, the good one not loaded. -check now
// reports each at its line; a bad list line is skipped with a warning at
// FILE:LINE and the rest of the list loads, at start and on reload.
func TestSOCKS5CredentialsRFC1929Checked(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	a := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	b := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	long := strings.Repeat("p", 300)
	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.toml")
	list := filepath.Join(dir, "proxies.txt")
	write := func(p, text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	head := fmt.Sprintf("[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n%s\n"+
		"[[upstream_file]]\npath = \"proxies.txt\"\nscheme = \"socks5\"\n", probeConf(target))
	bad := head + "[[upstream]]\nurl = \"socks5://:pw@127.0.0.1:46111\"\n" +
		"[[upstream]]\nurl = \"socks5://u:" + long + "@127.0.0.1:46112\"\n"
	write(path, bad)
	write(list, a.Addr()+"\n"+
		"socks5://u:"+long+"@127.0.0.1:46113\n"+ // 2
		"127.0.0.1:46114:"+strings.Repeat("u", 256)+":pw\n") // 3

	err := CheckConfig(path)
	if err == nil {
		t.Fatal("-check passed socks5 credentials RFC 1929 cannot carry")
	}
	want := []string{
		fmt.Sprintf("%s:%d: upstream \"socks5://:xxxxx@127.0.0.1:46111\": socks5 username must not be empty (RFC 1929)", path, lineOf(t, bad, "46111")),
		fmt.Sprintf("%s:%d: upstream \"socks5://u:xxxxx@127.0.0.1:46112\": socks5 username and password must be at most 255 bytes (RFC 1929)", path, lineOf(t, bad, "46112")),
		list + ":2: upstream \"socks5://u:xxxxx@127.0.0.1:46113\": socks5 username and password must be at most 255 bytes (RFC 1929)",
		list + ":3: upstream \"socks5://" + strings.Repeat("u", 256) + ":xxxxx@127.0.0.1:46114\": socks5 username and password must be at most 255 bytes (RFC 1929)",
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("-check:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
	if strings.Contains(err.Error(), long) {
		t.Error("-check shows the password")
	}

	// Without the bad [[upstream]]s rotor starts: the bad list lines are
	// skipped with a warning at their line.
	write(path, head)
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	srv, err := New(cfg, Options{Log: zerolog.New(logs)})
	if err != nil {
		t.Fatalf("start refused a list with bad lines: %v", err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(t.Context()) })
	if n := len(srv.Pool().Endpoints()); n != 1 || srv.Pool().Lookup(a.Addr()) == nil {
		t.Fatalf("%d upstreams at start, want only %s", n, a.Addr())
	}
	if !strings.Contains(logs.String(), list+":2: ") || !strings.Contains(logs.String(), list+":3: ") {
		t.Errorf("the skipped lines were not logged with FILE:LINE: %s", logs.String())
	}

	// A reload adding a bad line and a good one loads the good one.
	write(list, a.Addr()+"\nsocks5://:pw@127.0.0.1:46115\n"+b.Addr()+"\n")
	if err := srv.ReloadFile(); err != nil {
		t.Fatalf("reload rejected: %v", err)
	}
	if srv.Pool().Lookup(b.Addr()) == nil {
		t.Error("the good new line was not loaded")
	}
	if !strings.Contains(logs.String(), list+":2: ") {
		t.Errorf("the bad line of the reload was not logged with FILE:LINE: %s", logs.String())
	}
	if strings.Contains(logs.String(), long) {
		t.Error("the log shows the password")
	}
}
