package gateway

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// hostRequest sends method path to base with Host host ("" keeps the
// address's) and the header pairs hdr; it returns status, headers, body.
func hostRequest(t *testing.T, base, method, path, host, body string, hdr ...string) (int, http.Header, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, path, host, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

// errorText is the "error" of a JSON error body.
func errorText(body string) string {
	var e struct{ Error string }
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error
}

// TestAdminHost: the Host names that pass without an admin token are
// those no DNS answer decides (localhost, loopback and the listener's own
// address, with or without a port); a name anyone can point at 127.0.0.1
// does not.
func TestAdminHost(t *testing.T) {
	own := &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 9090}
	for _, tt := range []struct {
		host  string
		local net.Addr
		want  bool
	}{
		{"127.0.0.1:9090", nil, true},
		{"127.0.0.1", nil, true},
		{"127.0.0.2:80", nil, true},
		{"[::1]:9090", nil, true},
		{"[::1]", nil, true},
		{"[::ffff:127.0.0.1]:9090", nil, true},
		{"localhost", nil, true},
		{"localhost:9090", nil, true},
		{"LocalHost:9090", nil, true},
		{"localhost.", nil, true},
		{"localhost.:9090", nil, true},
		{"", nil, true}, // HTTP/1.0 without Host: no browser
		{"192.0.2.7:9090", own, true},
		{"192.0.2.7", own, true},

		{"rebind.evil.example", nil, false},
		{"rebind.evil.example:9090", nil, false},
		{"localhost.evil.example:9090", nil, false},
		{"127.0.0.1.nip.io:9090", nil, false},
		{"evil.localhost:9090", nil, false},
		{"localhost:evil", nil, false},
		{":9090", nil, false},
		{"192.0.2.7:9090", nil, false},
		{"192.0.2.8:9090", own, false},
		{"0.0.0.0:9090", &net.TCPAddr{IP: net.IPv4zero, Port: 9090}, false},
		{"10.0.0.1:9090", nil, false},
		{"[fe80::1]:9090", nil, false},
	} {
		if got := adminHost(tt.host, tt.local); got != tt.want {
			t.Errorf("adminHost(%q, %v) = %v, want %v", tt.host, tt.local, got, tt.want)
		}
	}
}

// TestAdminRefusesForeignHost: without an admin token the loopback admin
// API answered any Host, so a DNS-rebinding page (rebind.evil.example,
// resolved to 127.0.0.1 once the page loaded) read /api/upstreams as its
// own origin and could act on it. Such a Host is a 403 with a JSON error
// on every endpoint but /healthz; loopback names keep working, and with a
// token (an admin reached by any name) the Host is not checked.
func TestAdminRefusesForeignHost(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	_, port, _ := net.SplitHostPort(f.http.Listener.Addr().String())
	for _, host := range []string{"rebind.evil.example", "rebind.evil.example:" + port, "LOCALHOST.evil.example:" + port} {
		for _, rq := range []struct{ method, path string }{
			{"GET", "/api/upstreams"}, {"GET", "/api/upstreams/dc-1"}, {"GET", "/api/status"},
			{"GET", "/metrics"}, {"GET", "/"}, {"GET", "/nope"},
			{"POST", "/api/upstreams/dc-1/disable"}, {"POST", "/api/upstreams/dc-1/report"},
		} {
			code, hdr, body := hostRequest(t, f.http.URL, rq.method, rq.path, host, `{"class":"refused"}`)
			if code != http.StatusForbidden {
				t.Errorf("%s %s with Host %s: %d, want 403", rq.method, rq.path, host, code)
				continue
			}
			assertJSONError(t, hdr, body)
			if e := errorText(body); !strings.Contains(e, "is not this admin listener") || strings.Contains(body, "dc-1") {
				t.Errorf("%s %s with Host %s: error %q", rq.method, rq.path, host, e)
			}
		}
		if code, _, body := hostRequest(t, f.http.URL, "GET", "/healthz", host, ""); code == http.StatusForbidden {
			t.Errorf("/healthz with Host %s: 403 %s; it stays open, as it is without a token", host, body)
		}
	}
	if st := f.record(t, "dc-1")["state"]; st != "eligible" {
		t.Errorf("dc-1 is %v after requests under a foreign Host, want eligible", st)
	}

	for _, host := range []string{"", "127.0.0.1:" + port, "localhost:" + port, "LOCALHOST.:" + port, "localhost", "[::1]:" + port} {
		for _, path := range []string{"/api/upstreams", "/api/status", "/metrics", "/", "/healthz"} {
			code, _, body := hostRequest(t, f.http.URL, "GET", path, host, "")
			if code == http.StatusForbidden {
				t.Errorf("GET %s with Host %q: 403 %s", path, host, body)
			}
		}
	}
	if code, _, body := hostRequest(t, f.http.URL, "POST", "/api/upstreams/dc-1/disable", "localhost:"+port, ""); code != http.StatusOK {
		t.Errorf("POST disable with Host localhost: %d %s, want 200", code, body)
	}

	// HTTP/1.0 without Host is no browser's request.
	conn, err := net.Dial("tcp", f.http.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /api/upstreams HTTP/1.0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("HTTP/1.0 GET without Host: %d, want 200", resp.StatusCode)
	}

	// With a token the operator reaches the admin by any name.
	tf := newAdminFixture(t, strings.Replace(adminConfig, "[listen]\n", "[listen]\nadmin_token = \"tok-s3cr3t\"\n", 1), fixedClock())
	bearer := []string{"Authorization", "Bearer tok-s3cr3t"}
	if code, _, body := hostRequest(t, tf.http.URL, "GET", "/api/upstreams", "rotor.internal.example:9090", "", bearer...); code != http.StatusOK {
		t.Errorf("token set: GET with Host rotor.internal.example: %d %s, want 200", code, body)
	}
	if code, _, _ := hostRequest(t, tf.http.URL, "GET", "/api/upstreams", "rotor.internal.example:9090", ""); code != http.StatusUnauthorized {
		t.Errorf("token set: GET without the token: %d, want 401", code)
	}
}

// TestAdminRefusesCrossOriginChanges: a page of any site could make the
// operator's browser POST to the loopback admin API (a text/plain body is
// a CORS simple request: no preflight) and disable, enable or report an
// upstream. A state change whose Sec-Fetch-Site is not same-origin or
// none, or (an older browser) whose Origin is not the Host, is a 403 with
// a JSON error, token or not; reads, same-origin requests and clients that
// send neither header (curl) are served.
func TestAdminRefusesCrossOriginChanges(t *testing.T) {
	for _, token := range []string{"", "tok-s3cr3t"} {
		cfg := adminConfig
		var auth []string
		if token != "" {
			cfg = strings.Replace(adminConfig, "[listen]\n", "[listen]\nadmin_token = \""+token+"\"\n", 1)
			auth = []string{"Authorization", "Bearer " + token}
		}
		f := newAdminFixture(t, cfg, fixedClock())
		self := f.http.URL // http://127.0.0.1:port
		u, _ := url.Parse(self)
		actions := []struct{ path, body string }{
			{"/api/upstreams/dc-1/disable", `{}`},
			{"/api/upstreams/dc-1/enable", `{}`},
			{"/api/upstreams/dc-1/report", `{"class":"refused"}`},
		}
		for _, hdr := range [][]string{
			{"Origin", "http://evil.example"},
			{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"},
			{"Sec-Fetch-Site", "cross-site"},
			{"Sec-Fetch-Site", "same-site", "Origin", "http://localhost:" + u.Port()},
			{"Origin", "null"},
			{"Origin", "http://localhost:" + u.Port()},
			{"Origin", "http://127.0.0.1:1"},
			{"Origin", self, "Sec-Fetch-Site", "cross-site"},
		} {
			for _, a := range actions {
				h := append(append([]string{"Content-Type", "text/plain"}, hdr...), auth...)
				code, rh, body := f.do(t, "POST", a.path, a.body, h...)
				if code != http.StatusForbidden {
					t.Errorf("token %q: POST %s with %q: %d, want 403", token, a.path, hdr, code)
					continue
				}
				assertJSONError(t, rh, body)
				if e := errorText(body); !strings.HasPrefix(e, "cross-origin request refused: a POST from a browser page") {
					t.Errorf("token %q: POST %s with %q: error %q", token, a.path, hdr, e)
				}
			}
		}
		code, _, body := f.do(t, "GET", "/api/upstreams/dc-1", "", auth...)
		var rec map[string]any
		if err := json.Unmarshal([]byte(body), &rec); code != http.StatusOK || err != nil {
			t.Fatalf("token %q: GET dc-1: %d %s", token, code, body)
		}
		if rec["state"] != "eligible" || len(rec["history"].([]any)) != 0 {
			t.Fatalf("token %q: dc-1 is %v with %d transitions after cross-origin POSTs, want eligible and untouched",
				token, rec["state"], len(rec["history"].([]any)))
		}
		if strings.Contains(f.logs.String(), "admin: ") {
			t.Errorf("token %q: a refused action was logged as done:\n%s", token, f.logs)
		}

		// Reads are not state changes: a cross-origin page cannot read
		// the answer (no CORS header) and the status page's own
		// fetches are same-origin.
		for _, hdr := range [][]string{{"Origin", "http://evil.example"}, {"Sec-Fetch-Site", "cross-site"}} {
			if code, _, body := f.do(t, "GET", "/api/status", "", append(hdr, auth...)...); code != http.StatusOK {
				t.Errorf("token %q: GET /api/status with %q: %d %s, want 200", token, hdr, code, body)
			}
		}
		for _, hdr := range [][]string{
			nil, // curl, scripts
			{"Origin", self},
			{"Origin", self, "Sec-Fetch-Site", "same-origin"},
			{"Sec-Fetch-Site", "same-origin"},
			{"Sec-Fetch-Site", "none"}, // typed by the user, not sent by a page
		} {
			code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/disable", "", append(hdr, auth...)...)
			if code != http.StatusOK {
				t.Errorf("token %q: POST disable with %q: %d %s, want 200", token, hdr, code, body)
			}
		}
	}
}

// TestAdminForeignPagesInBrowser runs the two attacks in headless
// Chromium against a real admin listener without a token: a page of
// another site (http://localhost:<port>, cross-site to 127.0.0.1) POSTs
// a text/plain body to disable dc-1, and a page under a rebound name
// (rebind.evil.example mapped to 127.0.0.1 by the browser's resolver
// rules, as the attacker's DNS would) loads the admin API as its own. The
// status page opened at localhost still refreshes. Opt-in like
// TestStatusPageInBrowser (ROTOR_BROWSER=1).
func TestAdminForeignPagesInBrowser(t *testing.T) {
	chromium := browserOrSkip(t)
	srv := startAdminServer(t, adminConfig)
	admin := "http://" + srv.Addr("admin")
	_, adminPort, _ := net.SplitHostPort(srv.Addr("admin"))

	done := make(chan string, 1)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/done" {
			select {
			case done <- r.URL.Query().Get("r"):
			default:
			}
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, `<!doctype html><title>evil</title><script>
fetch("`+admin+`/api/upstreams/dc-1/disable", {method: "POST", mode: "no-cors",
  headers: {"Content-Type": "text/plain"}, body: '{"detail": "csrf"}'})
  .then(() => "answered", (e) => "error " + e)
  .then((r) => fetch("/done?r=" + encodeURIComponent(r)));
</script>`)
	}))
	t.Cleanup(evil.Close)
	_, evilPort, _ := net.SplitHostPort(evil.Listener.Addr().String())
	dumpDOM(t, chromium, "http://localhost:"+evilPort+"/")
	select {
	case r := <-done:
		if r != "answered" {
			t.Fatalf("the cross-site page's POST did not reach the admin listener: %s", r)
		}
	default:
		t.Fatal("the cross-site page's script did not run to the end")
	}
	if st, _ := srv.tr.Status(srv.pool.Lookup("dc-1").Record()); st.String() != "eligible" {
		t.Errorf("a cross-site page's POST moved dc-1 to %s", st)
	}

	dom := runChromium(t, chromium, "--host-resolver-rules=MAP rebind.evil.example 127.0.0.1", "--dump-dom",
		"--virtual-time-budget=3000", "http://rebind.evil.example:"+adminPort+"/api/upstreams")
	if strings.Contains(dom, "dc-1") || !strings.Contains(dom, "is not this admin listener") {
		t.Errorf("the rebound name read the admin API:\n%s", dom)
	}

	dom = dumpDOM(t, chromium, "http://localhost:"+adminPort+"/")
	if !strings.Contains(dom, `data-name="dc-1"`) || !strings.Contains(dom, `<span id="updated">updated `) {
		t.Errorf("the status page at localhost does not show or refresh")
	}
}
