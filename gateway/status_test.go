package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

func TestStatusPageRendersEachUpstream(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"refused","detail":"refused <b>by</b> exit"}`)
	f.do(t, "POST", "/api/upstreams/bob@127.0.0.1:2/disable", "")
	code, hdr, body := f.do(t, "GET", "/", "")
	if code != http.StatusOK {
		t.Fatalf("GET /: %d", code)
	}
	if ct := hdr.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type = %q", ct)
	}
	csp := hdr.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	for _, want := range []string{
		`data-name="dc-1" data-state="cooling"`,
		`<span class="badge s-cooling">cooling</span>`,
		`socks5://alice:xxxxx@127.0.0.1:1`,
		`data-name="bob@127.0.0.1:2" data-state="disabled"`,
		`<span class="badge s-disabled">disabled</span>`,
		`data-until="2026-11-29T22:00:30Z">30s</span>`, // time left, from the render clock
		`refused &lt;b&gt;by&lt;/b&gt; exit`,           // details are escaped
	} {
		if !strings.Contains(body, want) {
			t.Errorf("status page lacks %q", want)
		}
	}
	for _, card := range []string{`cooling" data-state="cooling"[^>]*><b>1</b>`, `disabled" data-state="disabled"[^>]*><b>1</b>`,
		`eligible" data-state="eligible"[^>]*><b>0</b>`} {
		if !regexp.MustCompile(`<button type="button" class="card ` + card).MatchString(body) {
			t.Errorf("status page lacks the card %s", card)
		}
	}
	// No external assets: every src/href stays on the admin origin.
	for _, m := range regexp.MustCompile(`(?i)(?:src|href)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(body, -1) {
		if !strings.HasPrefix(m[1], "/") {
			t.Errorf("status page references %q", m[1])
		}
	}
	nonce := regexp.MustCompile(`<script nonce="([^"]+)">`).FindStringSubmatch(body)
	if nonce == nil || !strings.Contains(csp, "'nonce-"+nonce[1]+"'") {
		t.Errorf("inline script nonce does not match the CSP")
	}
}

func TestStatusAPITotals(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	f.do(t, "POST", "/api/upstreams/dc-1/disable", "")
	code, _, body := f.do(t, "GET", "/api/status", "")
	if code != http.StatusOK {
		t.Fatalf("GET /api/status: %d", code)
	}
	for _, want := range []string{`"disabled": 1`, `"eligible": 1`, `"cooling": 0`, `"probe_allowed": 0`, `"waiting": 0`, `"tunnels": 0`, `"upstreams": [`} {
		if !strings.Contains(body, want) {
			t.Errorf("/api/status lacks %s", want)
		}
	}
}

func TestStatusFormatLeft(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, ""}, {-time.Second, ""}, {time.Millisecond, "1s"}, {59 * time.Second, "59s"},
		{61 * time.Second, "1m 01s"}, {10*time.Minute + 5*time.Second, "10m 05s"}, {2*time.Hour + 3*time.Minute, "2h 03m"},
	}
	for _, tt := range tests {
		if got := formatLeft(tt.d); got != tt.want {
			t.Errorf("formatLeft(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}

// TestStatusPageInBrowser loads the status page in headless Debian
// chromium, checks every upstream shows with its state, changes a state
// through the admin API while the page is open and checks that the page's
// own refresh shows the new state. Opt-in: ROTOR_BROWSER=1 (then a missing
// chromium fails the test). ROTOR_STATUS_SCREENSHOT=<file.png> also saves
// a screenshot.
func TestStatusPageInBrowser(t *testing.T) {
	chromium := browserOrSkip(t)
	srv := startAdminServer(t, adminConfig)
	adminURL := "http://" + srv.Addr("admin")
	// The page is served by the admin handler behind a hook that disables
	// dc-1 through the real admin API right after the page's first
	// refresh: the server-rendered HTML says eligible, only the script's
	// later refreshes can show disabled.
	var fetches atomic.Int32
	h := srv.adminHandler()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		if r.URL.Path == "/api/status" && fetches.Add(1) == 1 {
			code, _, body := doRequest(t, adminURL, "POST", "/api/upstreams/dc-1/disable", "")
			if code != http.StatusOK {
				t.Errorf("disable through the API: %d %s", code, body)
			}
		}
	}))
	t.Cleanup(page.Close)

	dom := dumpDOM(t, chromium, page.URL+"/")
	if fetches.Load() < 2 {
		t.Errorf("the page fetched /api/status %d times in 5s of virtual time, want >= 2", fetches.Load())
	}
	if !regexp.MustCompile(`<body[^>]* data-refreshed="[2-9]`).MatchString(dom) {
		t.Errorf("the page did not refresh twice (data-refreshed)")
	}
	rows := map[string]string{"dc-1": "disabled", "bob@127.0.0.1:2": "eligible"}
	for name, state := range rows {
		row := regexp.MustCompile(`<details class="up" data-name="` + regexp.QuoteMeta(name) + `" data-state="([a-z_]+)"`).FindStringSubmatch(dom)
		if row == nil {
			t.Errorf("upstream %s missing from the page", name)
			continue
		}
		if row[1] != state {
			t.Errorf("upstream %s shows %s, want %s", name, row[1], state)
		}
	}
	if !strings.Contains(dom, `<span class="badge s-disabled">disabled</span>`) {
		t.Errorf("no disabled badge after the refresh")
	}
	if !strings.Contains(dom, `<span class="dot"></span><span id="updated">updated `) {
		t.Errorf("the refresh indicator does not say updated")
	}

	// A fresh load shows the new state too, rendered by the server.
	dom = dumpDOM(t, chromium, adminURL+"/")
	if !strings.Contains(dom, `data-name="dc-1" data-state="disabled"`) {
		t.Errorf("fresh load: dc-1 not shown disabled")
	}
	// With an admin token: /?token= once, then the page and its refresh
	// run on the cookie.
	tokSrv := startAdminServer(t, strings.Replace(adminConfig, "[listen]\n", "[listen]\nadmin_token = \"tok-browser\"\n", 1))
	dom = dumpDOM(t, chromium, "http://"+tokSrv.Addr("admin")+"/?token=tok-browser")
	if !strings.Contains(dom, `data-name="dc-1" data-state="eligible"`) {
		t.Errorf("token flow: the page does not show dc-1")
	}
	if !regexp.MustCompile(`<body[^>]* data-refreshed="[1-9]`).MatchString(dom) || !strings.Contains(dom, `<span id="updated">updated `) {
		t.Errorf("token flow: the page's refresh is not authorized:\n%s", regexp.MustCompile(`<div class="live[^\n]*`).FindString(dom))
	}

	if shot := os.Getenv("ROTOR_STATUS_SCREENSHOT"); shot != "" {
		srv.tr.Enable(srv.pool.Lookup("dc-1").Record())
		srv.pool.Report(srv.pool.Lookup("bob@127.0.0.1:2"), &health.Failure{Class: health.Refused, Stage: health.StageDial})
		runChromium(t, chromium, "--screenshot="+shot, "--window-size=1200,800", adminURL+"/")
	}
}

// browserOrSkip returns chromium's path for the opt-in browser tests: they
// are skipped unless ROTOR_BROWSER is set, and then a missing chromium fails.
func browserOrSkip(t *testing.T) string {
	t.Helper()
	if os.Getenv("ROTOR_BROWSER") == "" {
		t.Skip("headless-browser test: set ROTOR_BROWSER=1 to run it (needs chromium)")
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("ROTOR_BROWSER is set but chromium is not installed (apt-get install chromium)")
	return ""
}

// dumpDOM returns the DOM of url after 5s of virtual time (the page's
// script runs: at least two refreshes).
func dumpDOM(t *testing.T, chromium, url string) string {
	t.Helper()
	return runChromium(t, chromium, "--dump-dom", "--virtual-time-budget=5000", url)
}

func runChromium(t *testing.T, chromium string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + filepath.Join(t.TempDir(), "profile")}
	cmd := exec.CommandContext(ctx, chromium, append(base, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}
