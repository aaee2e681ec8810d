package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestAdminEnableConfigDisabled: an enable of an upstream its config entry
// disables is a 409 saying so, and changes nothing. Bug: it was accepted
// (the upstream probed and served) and the next reload of any part of the
// config disabled it again, so whether it served hung on whether an
// unrelated file had been touched. An operator's own disable is enabled
// as before; the config's disabled = false ends the config's disable.
func TestAdminEnableConfigDisabled(t *testing.T) {
	text := strings.Replace(adminConfig, "name = \"dc-1\"\n", "name = \"dc-1\"\ndisabled = true\n", 1)
	f := newAdminFixture(t, text, fixedClock())
	code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/enable", "")
	if code != http.StatusConflict || !strings.Contains(body, "disabled in the config") || !strings.Contains(body, "disabled = false") {
		t.Fatalf("enable of a config-disabled upstream: %d %s, want 409 naming the config", code, body)
	}
	if rec := f.record(t, "dc-1"); rec["state"] != "disabled" || len(rec["history"].([]any)) != 0 {
		t.Errorf("after the refused enable: state %v, history %v; want disabled, no entry", rec["state"], rec["history"])
	}

	// The operator's own disable of the other upstream is enabled.
	if code, _, body := f.do(t, "POST", "/api/upstreams/bob@127.0.0.1:2/disable", ""); code != http.StatusOK {
		t.Fatalf("disable: %d %s", code, body)
	}
	if code, _, body := f.do(t, "POST", "/api/upstreams/bob@127.0.0.1:2/enable", ""); code != http.StatusOK {
		t.Fatalf("enable of an operator's disable: %d %s", code, body)
	}

	// The config's disabled = false (a reload) enables dc-1.
	cfg, err := ParseConfig("admin_test.toml", []byte(adminConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if rec := f.record(t, "dc-1"); rec["state"] != "probe_allowed" {
		t.Errorf("after the config enabled it: %v, want probe_allowed", rec["state"])
	}
}

// TestAdminEnableOperatorThenConfigDisabled: an upstream an operator
// disabled before its config did gets a 409 whose fix works: set
// disabled = false and reload, THEN enable it here; the reload says why it
// stays disabled. Issue: the 409 said only to set disabled = false, which
// left it disabled with no word.
func TestAdminEnableOperatorThenConfigDisabled(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	if code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/disable", ""); code != http.StatusOK {
		t.Fatalf("disable: %d %s", code, body)
	}
	reload := func(text string) {
		t.Helper()
		cfg, err := ParseConfig("admin_test.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.srv.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
	reload(strings.Replace(adminConfig, "name = \"dc-1\"\n", "name = \"dc-1\"\ndisabled = true\n", 1))
	code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/enable", "")
	if code != http.StatusConflict || !strings.Contains(body, "disabled = false") || !strings.Contains(body, "then enable it here") {
		t.Fatalf("enable: %d %s, want a 409 saying to reload with disabled = false, then enable", code, body)
	}
	reload(adminConfig)
	if rec := f.record(t, "dc-1"); rec["state"] != "disabled" {
		t.Fatalf("after disabled = false: %v, want still disabled (the operator's disable)", rec["state"])
	}
	if !strings.Contains(f.logs.String(), "an operator's disable from before still holds") {
		t.Errorf("the reload did not say why it stays disabled:\n%s", f.logs)
	}
	if code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/enable", ""); code != http.StatusOK {
		t.Fatalf("enable after the reload: %d %s", code, body)
	}
}
