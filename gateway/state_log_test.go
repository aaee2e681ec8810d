package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestOperatorDisableLogLine: the state-change line of an operator's
// disable says stage operator and no class (operator is a stage; an
// operator's disable is no failure of any class: it said
// "class":"operator"), and carries the operator's reason, as the history
// entry does (it was dropped: the line said only from and to).
func TestOperatorDisableLogLine(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	if code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/disable", `{"detail":"maintenance window"}`); code != http.StatusOK {
		t.Fatalf("disable: %d %s", code, body)
	}
	got := stateLine(t, f.logs, "dc-1", "to", "disabled")
	if c, ok := got["class"]; ok {
		t.Errorf("class %v on an operator's disable, want none: %v", c, got)
	}
	if got["stage"] != "operator" {
		t.Errorf("stage %v, want operator: %v", got["stage"], got)
	}
	if d, _ := got["detail"].(string); !strings.Contains(d, "maintenance window") {
		t.Errorf("detail %q, want the operator's reason: %v", d, got)
	}
	admin := linesWith(t, f.logs, "admin: upstream disabled")
	if len(admin) != 1 || !strings.Contains(admin[0]["detail"].(string), "maintenance window") {
		t.Errorf("admin line %v, want one with the operator's reason", admin)
	}

	// The enable's line likewise: stage operator, no class, and what the
	// history says of it.
	if code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/enable", ""); code != http.StatusOK {
		t.Fatalf("enable: %d %s", code, body)
	}
	got = stateLine(t, f.logs, "dc-1", "from", "disabled")
	if _, ok := got["class"]; ok || got["stage"] != "operator" || got["detail"] != "enabled by operator" {
		t.Errorf("enable line %v, want stage operator, no class, detail \"enabled by operator\"", got)
	}
}

// stateLine waits for the first "upstream state changed" line of
// upstream whose key is value, and returns it decoded.
func stateLine(t *testing.T, logs *logBuffer, upstream, key, value string) map[string]any {
	t.Helper()
	var got map[string]any
	eventuallyTrue(t, "the state-change line of "+upstream+" with "+key+" "+value, func() bool {
		for _, l := range linesWith(t, logs, "upstream state changed") {
			if l["upstream"] == upstream && l[key] == value {
				got = l
				return true
			}
		}
		return false
	})
	return got
}

// TestAdminReportLogLine: the admin line of a reported failure carries
// the client's detail (it was left out, so a report the upstream's state
// already covered left no trace of what was reported) and a target only
// when the report named one (it said "target":"").
func TestAdminReportLogLine(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, body := range []string{`{"class":"refused","detail":"ban page seen"}`, `{"class":"refused","detail":"again, for a host","target":"shop.example"}`} {
		if code, _, out := f.do(t, "POST", "/api/upstreams/dc-1/report", body); code != http.StatusOK {
			t.Fatalf("report %s: %d %s", body, code, out)
		}
	}
	lines := linesWith(t, f.logs, "admin: failure reported")
	if len(lines) != 2 {
		t.Fatalf("%d report lines, want 2: %s", len(lines), f.logs)
	}
	if d, _ := lines[0]["detail"].(string); !strings.Contains(d, "ban page seen") {
		t.Errorf("first line's detail %q, want the client's: %v", d, lines[0])
	}
	if tg, ok := lines[0]["target"]; ok {
		t.Errorf("first line names target %q, none was given: %v", tg, lines[0])
	}
	if d, _ := lines[1]["detail"].(string); !strings.Contains(d, "again, for a host") || lines[1]["target"] != "shop.example" {
		t.Errorf("second line: %v, want its detail and target shop.example", lines[1])
	}
}

// TestReloadLogsRemovedBeforeAdded: a reload that replaces an upstream by
// another of the same name (host:port, another user) logs the removal
// first: "upstream added X" then "upstream removed from config X" read
// as X gone, when the new X serves.
func TestReloadLogsRemovedBeforeAdded(t *testing.T) {
	conf := func(user string) string {
		return "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[[upstream]]\nurl = \"http://" + user + ":pw@127.0.0.1:2\"\n"
	}
	srv, logs := newGateway(t, "rotor.toml", conf("alice"))
	cfg, err := ParseConfig("rotor.toml", []byte(conf("bob")))
	if err != nil {
		t.Fatal(err)
	}
	start := len(logs.String())
	if err := srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	out := logs.String()[start:]
	removed, added := strings.Index(out, `"message":"upstream removed from config"`), strings.Index(out, `"message":"upstream added"`)
	if removed < 0 || added < 0 || removed > added {
		t.Errorf("want the removal's line, then the addition's:\n%s", out)
	}
}

// TestSOCKSWrongCredentialsLogNamesUser: the debug line of a SOCKS5 client
// whose credentials were refused names the user (its base name, never the
// password), as the HTTP front's 407 line does; it named none.
func TestSOCKSWrongCredentialsLogNamesUser(t *testing.T) {
	const canary = "wr0ng-c4n4ry"
	srv, logs := startGateway(t, "[[client]]\nusername = \"scraper\"\npassword = \"right-pw\"\n[[upstream]]\nurl = \"direct://\"\n")
	if _, err := socksGet(t, srv.Addr("socks5"), "scraper-session-s1", canary, "http://example.test/"); err == nil {
		t.Fatal("wrong credentials accepted")
	}
	var lines []map[string]any
	eventuallyTrue(t, "the handshake's line", func() bool {
		lines = linesWith(t, logs, "socks5 handshake failed")
		return len(lines) > 0
	})
	if lines[0]["user"] != "scraper" {
		t.Errorf("line %v, want user scraper", lines[0])
	}
	if strings.Contains(logs.String(), canary) {
		t.Errorf("the password in the log:\n%s", logs)
	}
}

// TestSwappedCredentialsLogNoPassword: a client that sends its password
// as the username is logged as "(unknown)", on both fronts. Issue: at
// debug, curl -x http://Cl1entPw:scraper@… logged "user":"Cl1entPw".
func TestSwappedCredentialsLogNoPassword(t *testing.T) {
	const pw = "Cl1entPw-s3cret"
	srv, logs := startGateway(t, "[[client]]\nusername = \"scraper\"\npassword = \""+pw+"\"\n[[upstream]]\nurl = \"direct://\"\n")
	if _, err := socksGet(t, srv.Addr("socks5"), pw, "scraper", "http://example.test/"); err == nil {
		t.Fatal("socks5: swapped credentials accepted")
	}
	resp, err := httpGet(t, srv.Addr("http"), pw, "scraper", "http://example.test/", false)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 407 {
		t.Fatalf("http: %d, want 407", resp.StatusCode)
	}
	for _, msg := range []string{"socks5 handshake failed", "proxy authentication required"} {
		var lines []map[string]any
		eventuallyTrue(t, msg, func() bool {
			lines = linesWith(t, logs, msg)
			return len(lines) > 0
		})
		if lines[0]["user"] != "(unknown)" {
			t.Errorf("%q line %v, want user (unknown)", msg, lines[0])
		}
	}
	if strings.Contains(logs.String(), "Cl1entPw") {
		t.Errorf("the password in the log:\n%s", logs)
	}
}
