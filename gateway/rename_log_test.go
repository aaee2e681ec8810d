package gateway

import (
	"strings"
	"testing"
)

// TestReloadLogsRename: an upstream renamed in the config (same URL, so
// the same record) is logged with its old name. Bug: nothing was logged;
// the API and metrics just switched names.
func TestReloadLogsRename(t *testing.T) {
	const head = "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n"
	srv, logs := startGateway(t, head+"[[upstream]]\nurl = \"socks5://127.0.0.1:1\"\nname = \"ms5\"\n")
	cfg, err := ParseConfig("rotor.toml", []byte(head+"[[upstream]]\nurl = \"socks5://127.0.0.1:1\"\nname = \"ms5b\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	start := len(logs.String())
	if err := srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	reload := logs.String()[start:]
	var line string
	for _, l := range strings.Split(reload, "\n") {
		if strings.Contains(l, "upstream renamed") {
			line = l
		}
	}
	if !strings.Contains(line, `"upstream":"ms5b"`) || !strings.Contains(line, `"was":"ms5"`) {
		t.Errorf("rename line %q, want upstream ms5b was ms5; log:\n%s", line, logs.String())
	}
	if strings.Contains(reload, "upstream added") || strings.Contains(reload, "upstream removed") {
		t.Errorf("a rename logged as an add or a removal:\n%s", reload)
	}
}
