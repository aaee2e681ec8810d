package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
)

// The golden-file flag is shared with other tests of the package that may
// define it first: define it only if nobody did.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files under testdata/")
	}
}

func updateGolden() bool {
	f := flag.Lookup("update")
	if f == nil {
		return false
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return false
	}
	b, _ := g.Get().(bool)
	return b
}

// canary is the upstream password every redaction test looks for.
const canary = "canary-pw-7731"

// adminConfig has two upstreams on closed loopback ports, both carrying the
// canary password, one named with ':' and '@' like list-file defaults.
const adminConfig = `
[listen]
socks5 = "127.0.0.1:0"
http   = "127.0.0.1:0"
admin  = "127.0.0.1:0"

[pool]
start_eligible    = true
wait_for_upstream = "200ms"

[cooldown]
jitter = -1

[[upstream]]
url  = "socks5://alice:` + canary + `@127.0.0.1:1"
name = "dc-1"
tags = ["us", "dc"]

[[upstream]]
url  = "http://bob:` + canary + `@127.0.0.1:2"
name = "bob@127.0.0.1:2"
`

// adminFixture is a Server whose admin handler is served by httptest. With
// a non-nil clock nothing is started (no prober, no listeners), so records
// change only through the test.
type adminFixture struct {
	srv  *Server
	http *httptest.Server
	logs *logBuffer
	clk  *healthtest.Clock
}

func newAdminFixture(t *testing.T, text string, clk *healthtest.Clock) *adminFixture {
	t.Helper()
	cfg, err := ParseConfig("admin_test.toml", []byte(text))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logs := &logBuffer{}
	opt := Options{Log: zerolog.New(logs)}
	if clk != nil {
		opt.Clock = clk
	}
	srv, err := New(cfg, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv.adminHandler())
	t.Cleanup(hs.Close)
	return &adminFixture{srv: srv, http: hs, logs: logs, clk: clk}
}

func fixedClock() *healthtest.Clock {
	return healthtest.NewClock(time.Date(2026, 11, 29, 22, 0, 0, 0, time.UTC))
}

// do sends a request and returns status, headers and body.
func (f *adminFixture) do(t *testing.T, method, path, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	return doRequest(t, f.http.URL, method, path, body, hdr...)
}

func doRequest(t *testing.T, base, method, path, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func (f *adminFixture) record(t *testing.T, name string) map[string]any {
	t.Helper()
	code, _, body := f.do(t, "GET", "/api/upstreams/"+pathEscape(name), "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", name, code, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("GET %s: %v\n%s", name, err, body)
	}
	return m
}

func pathEscape(s string) string {
	r := strings.NewReplacer("%", "%25", "/", "%2F", "@", "%40", ":", "%3A", " ", "%20", "?", "%3F", "#", "%23")
	return r.Replace(s)
}

// TestAdminListGolden pins the JSON shape of /api/upstreams (CONTRACT.md)
// against testdata/admin_upstreams.golden.json: one cooling record with a
// per-target cooldown and history, one disabled record.
func TestAdminListGolden(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, step := range []struct{ path, body string }{
		{"/api/upstreams/dc-1/report", `{"class":"target_http_error","detail":"403 from shop","target":"Shop.Example:443"}`},
		{"/api/upstreams/dc-1/report", `{"class":"refused","detail":"connection refused by exit"}`},
		{"/api/upstreams/bob%40127.0.0.1%3A2/disable", ""},
	} {
		f.clk.Advance(time.Second)
		if code, _, body := f.do(t, "POST", step.path, step.body); code != http.StatusOK {
			t.Fatalf("POST %s: %d %s", step.path, code, body)
		}
	}
	code, hdr, body := f.do(t, "GET", "/api/upstreams", "")
	if code != http.StatusOK {
		t.Fatalf("GET /api/upstreams: %d %s", code, body)
	}
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	golden := filepath.Join("testdata", "admin_upstreams.golden.json")
	if updateGolden() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run TestAdminListGolden -update)", err)
	}
	if body != string(want) {
		t.Errorf("GET /api/upstreams differs from %s (run with -update if intended)\ngot:\n%s\nwant:\n%s", golden, body, want)
	}
}

// TestAdminRecordShape checks the contract fields and their JSON types on
// a live record, independently of the golden file.
func TestAdminRecordShape(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"timeout"}`)
	rec := f.record(t, "dc-1")
	for key, kind := range map[string]string{
		"name": "string", "url": "string", "state": "string", "reason": "string", "stage": "string",
		"until": "string", "failures": "object", "successes": "number", "active": "number",
		"last_success": "null", "history": "array", "targets": "array",
	} {
		v, ok := rec[key]
		if !ok {
			t.Errorf("field %q missing", key)
			continue
		}
		if got := jsonKind(v); got != kind {
			t.Errorf("field %q is %s, want %s", key, got, kind)
		}
	}
	if got, want := rec["state"], "cooling"; got != want {
		t.Errorf("state = %v, want %v", got, want)
	}
	until, _ := rec["until"].(string)
	if _, err := time.Parse(time.RFC3339, until); err != nil {
		t.Errorf("until %q is not RFC 3339: %v", until, err)
	}
	hist, _ := rec["history"].([]any)
	if len(hist) != 1 {
		t.Fatalf("history has %d entries, want 1", len(hist))
	}
	h := hist[0].(map[string]any)
	for _, k := range []string{"at", "from", "to", "reason", "stage", "detail"} {
		if _, ok := h[k]; !ok {
			t.Errorf("history entry lacks %q", k)
		}
	}
	if h["from"] != "eligible" || h["to"] != "cooling" || h["reason"] != "timeout" || h["stage"] != "dial" {
		t.Errorf("history entry = %v", h)
	}
	// A fresh record: reason, stage and until are null, not "none".
	rec = f.record(t, "bob@127.0.0.1:2")
	for _, k := range []string{"reason", "stage", "until", "last_success"} {
		if rec[k] != nil {
			t.Errorf("fresh record: %s = %v, want null", k, rec[k])
		}
	}
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "?"
}

func TestAdminNamesWithReservedCharacters(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, path := range []string{
		"/api/upstreams/bob@127.0.0.1:2",
		"/api/upstreams/bob%40127.0.0.1%3A2",
		"/api/upstreams/bob%40127.0.0.1:2",
	} {
		code, _, body := f.do(t, "GET", path, "")
		if code != http.StatusOK || !strings.Contains(body, `"name": "bob@127.0.0.1:2"`) {
			t.Errorf("GET %s: %d %s", path, code, body)
		}
	}
}

func TestAdminDisableEnable(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/disable", "")
	if code != http.StatusOK {
		t.Fatalf("disable: %d %s", code, body)
	}
	rec := f.record(t, "dc-1")
	if rec["state"] != "disabled" || rec["reason"] != "operator" || rec["stage"] != "operator" {
		t.Errorf("after disable: state %v reason %v stage %v, want disabled operator operator", rec["state"], rec["reason"], rec["stage"])
	}
	var list []map[string]any
	_, _, body = f.do(t, "GET", "/api/upstreams", "")
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0]["name"] != "dc-1" || list[1]["name"] != "bob@127.0.0.1:2" {
		t.Errorf("list after disable: want both upstreams in pool order, got %d records", len(list))
	}
	if code, _, body = f.do(t, "POST", "/api/upstreams/dc-1/enable", ""); code != http.StatusOK {
		t.Fatalf("enable: %d %s", code, body)
	}
	rec = f.record(t, "dc-1")
	if rec["state"] != "probe_allowed" {
		t.Errorf("after enable: state %v, want probe_allowed", rec["state"])
	}
	hist := rec["history"].([]any)
	if len(hist) != 2 {
		t.Fatalf("history: %d entries, want 2", len(hist))
	}
	last := hist[1].(map[string]any)
	if last["from"] != "disabled" || last["to"] != "probe_allowed" {
		t.Errorf("last history entry %v", last)
	}
	if !strings.Contains(f.logs.String(), "admin: upstream disabled") {
		t.Errorf("disable not logged")
	}
}

// TestAdminDisableDetail: disable takes an optional {"detail"} kept in
// the history (control characters dropped); a body that is not that JSON
// is a 400 and changes nothing.
func TestAdminDisableDetail(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	// Bug: a body with something after the object was taken (the first
	// object applied, the rest ignored).
	for _, body := range []string{"{not json", `{"reason": "x"}`, `["bad exit IPs"]`,
		`{"detail":"a"} trailing garbage`, `{"detail":"a"}{"detail":"b"}`} {
		code, hdr, out := f.do(t, "POST", "/api/upstreams/dc-1/disable", body)
		if code != http.StatusBadRequest {
			t.Errorf("disable with body %q: %d %s, want 400", body, code, out)
		}
		assertJSONError(t, hdr, out)
	}
	if rec := f.record(t, "dc-1"); rec["state"] == "disabled" {
		t.Fatal("a refused disable request disabled the upstream")
	}
	if code, _, out := f.do(t, "POST", "/api/upstreams/dc-1/disable", `{"detail": "bad exit IPs\n{\"level\":\"error\"}"}`); code != http.StatusOK {
		t.Fatalf("disable with a detail: %d %s", code, out)
	}
	hist := f.record(t, "dc-1")["history"].([]any)
	if d := hist[len(hist)-1].(map[string]any)["detail"]; d != `disabled via admin API: bad exit IPs {"level":"error"}` {
		t.Errorf("history detail %q", d)
	}
}

func TestAdminReport(t *testing.T) {
	tests := []struct {
		name, body        string
		wantCode          int
		wantState         string
		wantClass, wantSt string
		wantTarget        string
	}{
		{name: "refused cools the upstream", body: `{"class":"refused","detail":"x"}`, wantCode: 200, wantState: "cooling", wantClass: "refused", wantSt: "dial"},
		{name: "target_http_error with target cools for the host only", body: `{"class":"target_http_error","target":"shop.example:443"}`,
			wantCode: 200, wantState: "eligible", wantClass: "target_http_error", wantSt: "http_status", wantTarget: "shop.example"},
		{name: "slow_body defaults to stage body", body: `{"class":"slow_body"}`, wantCode: 200, wantState: "cooling", wantClass: "slow_body", wantSt: "body"},
		{name: "explicit stage", body: `{"class":"upstream_error","stage":"first_byte"}`, wantCode: 200, wantState: "cooling", wantClass: "upstream_error", wantSt: "first_byte"},
		{name: "a pasted URL names its host", body: `{"class":"target_http_error","target":"HTTP://Shop.Example/path?q=1"}`,
			wantCode: 200, wantState: "eligible", wantClass: "target_http_error", wantSt: "http_status", wantTarget: "shop.example"},
		{name: "bracketed IPv6 without port", body: `{"class":"target_http_error","target":"[::1]"}`,
			wantCode: 200, wantState: "eligible", wantClass: "target_http_error", wantSt: "http_status", wantTarget: "::1"},
		{name: "a target that is no host", body: `{"class":"target_http_error","target":"a b"}`, wantCode: 400},
		{name: "a URL without host", body: `{"class":"target_http_error","target":"http:///path"}`, wantCode: 400},
		{name: "a target longer than a host name", body: `{"class":"target_http_error","target":"` + strings.Repeat("a.", 130) + `com"}`, wantCode: 400},
		{name: "unknown class", body: `{"class":"bogus"}`, wantCode: 400},
		{name: "operator is not reportable", body: `{"class":"operator"}`, wantCode: 400},
		{name: "missing class", body: `{"detail":"x"}`, wantCode: 400},
		{name: "unknown stage", body: `{"class":"refused","stage":"nowhere"}`, wantCode: 400},
		{name: "unknown field", body: `{"class":"refused","klass":"x"}`, wantCode: 400},
		{name: "not JSON", body: `class=refused`, wantCode: 400},
		{name: "empty body", body: ``, wantCode: 400},
		// Bug: what followed the first JSON value was ignored, and the
		// report applied.
		{name: "a second object after the body", body: `{"class":"target_http_error"} {"x":1}`, wantCode: 400},
		{name: "garbage after the body", body: `{"class":"refused"}xxxx`, wantCode: 400},
		{name: "white space after the body", body: "{\"class\":\"refused\"} \r\n\t", wantCode: 200, wantState: "cooling", wantClass: "refused", wantSt: "dial"},
		// Bug: port 0 was taken (README: a port 0 is no target port).
		{name: "a target with port 0", body: `{"class":"target_http_error","target":"127.0.0.1:0"}`, wantCode: 400},
		{name: "a target with a port past 65535", body: `{"class":"target_http_error","target":"shop.example:65536"}`, wantCode: 400},
		{name: "a target with an empty port", body: `{"class":"target_http_error","target":"shop.example:"}`, wantCode: 400},
		{name: "a URL with port 0", body: `{"class":"target_http_error","target":"http://shop.example:0/ban"}`, wantCode: 400},
		{name: "a URL with its port", body: `{"class":"target_http_error","target":"https://Shop.Example:8443/ban"}`,
			wantCode: 200, wantState: "eligible", wantClass: "target_http_error", wantSt: "http_status", wantTarget: "shop.example"},
		// Bug: a client could report at rotor's own stages, and its report
		// showed in the history as a failed probe.
		{name: "stage probe is rotor's", body: `{"class":"refused","stage":"probe"}`, wantCode: 400},
		{name: "stage operator is rotor's", body: `{"class":"refused","stage":"operator"}`, wantCode: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newAdminFixture(t, adminConfig, fixedClock())
			code, hdr, body := f.do(t, "POST", "/api/upstreams/dc-1/report", tt.body, "Content-Type", "application/json")
			if code != tt.wantCode {
				t.Fatalf("code = %d, want %d (%s)", code, tt.wantCode, body)
			}
			if code != http.StatusOK {
				assertJSONError(t, hdr, body)
				return
			}
			rec := f.record(t, "dc-1")
			if rec["state"] != tt.wantState {
				t.Errorf("state = %v, want %v", rec["state"], tt.wantState)
			}
			fails := rec["failures"].(map[string]any)
			if fails[tt.wantClass] != 1.0 {
				t.Errorf("failures = %v, want %s: 1", fails, tt.wantClass)
			}
			byStage := rec["failures_by_stage"].(map[string]any)
			if byStage[tt.wantSt] != 1.0 {
				t.Errorf("failures_by_stage = %v, want %s: 1", byStage, tt.wantSt)
			}
			targets := rec["targets"].([]any)
			if tt.wantTarget == "" {
				if len(targets) != 0 {
					t.Errorf("targets = %v, want none", targets)
				}
				return
			}
			if len(targets) != 1 || targets[0].(map[string]any)["host"] != tt.wantTarget {
				t.Errorf("targets = %v, want host %s", targets, tt.wantTarget)
			}
		})
	}
}

// TestAdminBodyErrorMessages: each refused body says what is wrong with it
// (bugs: trailing data after the JSON object, a port 0 and the stages probe
// and operator were all taken).
func TestAdminBodyErrorMessages(t *testing.T) {
	tests := []struct{ name, path, body, want string }{
		{"garbage after a report", "report", `{"class":"refused"}xxxx`, "after the JSON object: invalid character 'x'"},
		{"a second value after a report", "report", `{"class":"refused"} {"x":1}`, "more than one JSON value"},
		{"garbage after a disable", "disable", `{"detail":"a"} trailing garbage`, "after the JSON object: invalid character"},
		{"a second value after a disable", "disable", `{"detail":"a"} {}`, "more than one JSON value"},
		{"port 0", "report", `{"class":"target_http_error","target":"127.0.0.1:0"}`, `invalid target "127.0.0.1:0": the port must be a number from 1 to 65535`},
		{"stage probe", "report", `{"class":"refused","stage":"probe"}`,
			`invalid stage "probe": want one of dial, proxy_handshake, proxy_auth, target_connect, first_byte, body, http_status`},
		{"stage operator", "report", `{"class":"refused","stage":"operator"}`, `invalid stage "operator": want one of dial,`},
		{"garbage to enable", "enable", `xxx{`, "invalid body: want no body or {}"},
		{"a field to enable", "enable", `{"x":1}`, `unknown field "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newAdminFixture(t, adminConfig, fixedClock())
			code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/"+tt.path, tt.body)
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatalf("%d %q: %v", code, body, err)
			}
			if code != http.StatusBadRequest || !strings.Contains(e.Error, tt.want) {
				t.Errorf("got %d %q, want 400 with %q", code, e.Error, tt.want)
			}
			rec := f.record(t, "dc-1")
			if rec["state"] != "eligible" || len(rec["history"].([]any)) != 0 {
				t.Errorf("a refused request changed the record: state %v, history %v", rec["state"], rec["history"])
			}
		})
	}
}

func assertJSONError(t *testing.T, hdr http.Header, body string) {
	t.Helper()
	if ct := hdr.Get("Content-Type"); ct != "application/json" {
		t.Errorf("error Content-Type = %q, want application/json", ct)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error == "" {
		t.Errorf("error body %q is not {\"error\": \"...\"}", body)
	}
}

func TestAdminNotFoundAndMethods(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	tests := []struct {
		method, path string
		wantCode     int
		wantAllow    string
	}{
		{"GET", "/api/upstreams/nope", 404, ""},
		{"POST", "/api/upstreams/nope/disable", 404, ""},
		{"POST", "/api/upstreams/nope/enable", 404, ""},
		{"POST", "/api/upstreams/nope/report", 404, ""},
		{"GET", "/api/nope", 404, ""},
		{"GET", "/api/upstreams/dc-1/nope", 404, ""},
		{"GET", "/nope", 404, ""},
		{"DELETE", "/api/upstreams", 405, "GET, HEAD"},
		{"POST", "/api/upstreams", 405, "GET, HEAD"},
		{"PUT", "/api/upstreams/dc-1", 405, "GET, HEAD"},
		{"GET", "/api/upstreams/dc-1/disable", 405, "POST"},
		{"GET", "/api/upstreams/dc-1/enable", 405, "POST"},
		{"DELETE", "/api/upstreams/dc-1/report", 405, "POST"},
		{"POST", "/metrics", 405, "GET, HEAD"},
		{"POST", "/", 405, "GET, HEAD"},
		{"POST", "/healthz", 405, "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			code, hdr, body := f.do(t, tt.method, tt.path, "")
			if code != tt.wantCode {
				t.Fatalf("code = %d, want %d (%s)", code, tt.wantCode, body)
			}
			assertJSONError(t, hdr, body)
			if got := hdr.Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
		})
	}
}

func TestAdminToken(t *testing.T) {
	f := newAdminFixture(t, strings.Replace(adminConfig, "[listen]\n", "[listen]\nadmin_token = \"tok-s3cr3t\"\n", 1), fixedClock())
	bearer := []string{"Authorization", "Bearer tok-s3cr3t"}
	wrong := []string{"Authorization", "Bearer tok-wrong"}
	for _, path := range []string{"/api/upstreams", "/api/upstreams/dc-1", "/api/status", "/metrics", "/"} {
		if code, hdr, body := f.do(t, "GET", path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without token: %d, want 401", path, code)
		} else {
			assertJSONError(t, hdr, body)
			if !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("GET %s: WWW-Authenticate = %q", path, hdr.Get("WWW-Authenticate"))
			}
		}
		if code, _, _ := f.do(t, "GET", path, "", wrong...); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, code)
		}
		if code, _, _ := f.do(t, "GET", path, "", bearer...); code != http.StatusOK {
			t.Errorf("GET %s with the token: %d, want 200", path, code)
		}
	}
	if code, _, _ := f.do(t, "POST", "/api/upstreams/dc-1/disable", ""); code != http.StatusUnauthorized {
		t.Errorf("POST disable without token: %d, want 401", code)
	}
	if code, _, _ := f.do(t, "POST", "/api/upstreams/dc-1/disable", "", bearer...); code != http.StatusOK {
		t.Errorf("POST disable with token: %d, want 200", code)
	}
	// /healthz stays open for orchestrators (503 here: nothing listens).
	if code, _, _ := f.do(t, "GET", "/healthz", ""); code == http.StatusUnauthorized {
		t.Errorf("GET /healthz asks for the token")
	}

	// The status page: ?token= once, then a cookie that only reads.
	if code, _, _ := f.do(t, "GET", "/?token=tok-wrong", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /?token=wrong: %d, want 401", code)
	}
	code, hdr, _ := f.do(t, "GET", "/?token=tok-s3cr3t", "")
	if code != http.StatusSeeOther || hdr.Get("Location") != "/" {
		t.Fatalf("GET /?token=: %d Location %q, want 303 to /", code, hdr.Get("Location"))
	}
	// A bookmarked view keeps its filters; only the token leaves the URL.
	if code, hdr, _ := f.do(t, "GET", "/?token=tok-s3cr3t&state=cooling", ""); code != http.StatusSeeOther || hdr.Get("Location") != "/?state=cooling" {
		t.Errorf("GET /?token=&state=cooling: %d Location %q, want 303 to /?state=cooling", code, hdr.Get("Location"))
	}
	// The auth scheme is case-insensitive (RFC 9110 §11.1).
	for _, h := range []string{"bearer tok-s3cr3t", "BEARER  tok-s3cr3t "} {
		if code, _, _ := f.do(t, "GET", "/api/upstreams", "", "Authorization", h); code != http.StatusOK {
			t.Errorf("GET with Authorization %q: %d, want 200", h, code)
		}
	}
	for _, h := range []string{"Bearer", "Bearer ", "Basic tok-s3cr3t", "Bearertok-s3cr3t"} {
		if code, _, _ := f.do(t, "GET", "/api/upstreams", "", "Authorization", h); code != http.StatusUnauthorized {
			t.Errorf("GET with Authorization %q: %d, want 401", h, code)
		}
	}
	cookie := hdr.Get("Set-Cookie")
	if !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || strings.Contains(cookie, "tok-s3cr3t") {
		t.Errorf("Set-Cookie = %q: want HttpOnly, SameSite=Strict, no token", cookie)
	}
	c := []string{"Cookie", strings.SplitN(cookie, ";", 2)[0]}
	for _, path := range []string{"/", "/api/status", "/api/upstreams"} {
		if code, _, _ := f.do(t, "GET", path, "", c...); code != http.StatusOK {
			t.Errorf("GET %s with the cookie: %d, want 200", path, code)
		}
	}
	if code, _, _ := f.do(t, "POST", "/api/upstreams/dc-1/enable", "", c...); code != http.StatusUnauthorized {
		t.Errorf("POST enable with only the cookie: %d, want 401", code)
	}
	if code, _, _ := f.do(t, "GET", "/api/upstreams?token=tok-s3cr3t", ""); code != http.StatusUnauthorized {
		t.Errorf("?token= accepted outside the status page")
	}
}

// TestAdminHealthz runs a real Server: 200 while the fronts listen, 503
// once shutdown began.
func TestAdminHealthz(t *testing.T) {
	srv := startAdminServer(t, adminConfig)
	base := "http://" + srv.Addr("admin")
	code, _, body := doRequest(t, base, "GET", "/healthz", "")
	if code != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz: %d %q, want 200 ok", code, body)
	}
	srv.cancel() // what Shutdown does once tunnels drained
	if code, _, _ := doRequest(t, base, "GET", "/healthz", ""); code != http.StatusServiceUnavailable {
		t.Errorf("GET /healthz after cancel: %d, want 503", code)
	}
}

// startAdminServer starts a real Server on loopback with the real clock.
func startAdminServer(t *testing.T, text string) *Server {
	t.Helper()
	cfg, err := ParseConfig("admin_test.toml", []byte(text))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	srv, err := New(cfg, Options{Log: zerolog.New(io.Discard)})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

// TestAdminRedaction drives real failures through the HTTP front (both
// upstreams refuse), then checks that no admin output and no log line
// carries the upstreams' password.
func TestAdminRedaction(t *testing.T) {
	cfg, err := ParseConfig("admin_test.toml", []byte(adminConfig))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	srv, err := New(cfg, Options{Log: zerolog.New(logs).Level(zerolog.DebugLevel)})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	c, err := net.DialTimeout("tcp", srv.Addr("http"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.WriteString(c, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
	resp, _ := io.ReadAll(io.LimitReader(c, 4096))
	_ = c.Close()
	if !bytes.HasPrefix(resp, []byte("HTTP/1.1 5")) {
		t.Fatalf("CONNECT through refusing upstreams: %q, want a 5xx", resp)
	}

	base := "http://" + srv.Addr("admin")
	_, _, list := doRequest(t, base, "GET", "/api/upstreams", "")
	if !strings.Contains(list, `"cooling"`) || !strings.Contains(list, `"refused"`) {
		t.Fatalf("upstreams did not cool as refused:\n%s", list)
	}
	if !strings.Contains(list, "socks5://alice:xxxxx@127.0.0.1:1") {
		t.Errorf("url not redacted as user:xxxxx@host:\n%s", list)
	}
	for _, path := range []string{"/api/upstreams", "/api/upstreams/dc-1", "/api/status", "/", "/metrics"} {
		_, _, body := doRequest(t, base, "GET", path, "")
		if strings.Contains(body, canary) {
			t.Errorf("GET %s leaks the upstream password", path)
		}
	}
	if strings.Contains(logs.String(), canary) {
		t.Errorf("logs leak the upstream password")
	}
}

// TestAdminScrubsPasswordFromDetails is the last line of defence: even a
// detail that carried the password (a hypothetical careless error) is
// redacted on the way out.
func TestAdminScrubsPasswordFromDetails(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	e := f.srv.pool.Lookup("dc-1")
	f.srv.tr.Fail(e.Record(), &health.Failure{Class: health.Refused, Stage: health.StageDial,
		Err: &net.OpError{Op: "dial", Net: "tcp", Err: io.ErrUnexpectedEOF, Source: nil, Addr: nil}})
	f.srv.tr.Disable(e.Record(), "operator pasted socks5://alice:"+canary+"@127.0.0.1:1")
	for _, path := range []string{"/api/upstreams", "/api/upstreams/dc-1", "/", "/api/status"} {
		_, _, body := f.do(t, "GET", path, "")
		if strings.Contains(body, canary) {
			t.Errorf("GET %s leaks the password from a detail", path)
		}
		if path == "/api/upstreams/dc-1" && !strings.Contains(body, "alice:xxxxx@") {
			t.Errorf("detail not scrubbed in place: %s", body)
		}
	}
}
