package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// listConfig is a pool of 30 upstreams: "up-00" .. "up-29", tagged "even"
// or "odd", and every third also "dc".
func listConfig(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(strings.Replace(adminConfig, "[[upstream]]", "[[upstream_file]]\npath = \"list.txt\"\nscheme = \"socks5\"\n\n[[upstream]]", 1))
	for i := range 30 {
		tags := `"odd"`
		if i%2 == 0 {
			tags = `"even"`
		}
		if i%3 == 0 {
			tags += `, "dc"`
		}
		fmt.Fprintf(&b, "\n[[upstream]]\nurl = \"socks5://127.0.0.1:%d\"\nname = \"up-%02d\"\ntags = [%s]\n", 10000+i, i, tags)
	}
	// A list file too, for records whose name is their address.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "list.txt"), []byte("127.0.0.9:1111:seller:"+canary+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	return b.String()
}

func listNames(t *testing.T, body string) []string {
	t.Helper()
	var recs []upstreamJSON
	if err := json.Unmarshal([]byte(body), &recs); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	out := make([]string, 0, len(recs))
	for _, r := range recs {
		out = append(out, r.Name)
	}
	return out
}

func TestAdminListFilterAndPage(t *testing.T) {
	f := newAdminFixture(t, listConfig(t), fixedClock())
	// up-03 and up-04 cool (refused, timeout), up-05 is disabled.
	f.do(t, "POST", "/api/upstreams/up-03/report", `{"class":"refused"}`)
	f.do(t, "POST", "/api/upstreams/up-04/report", `{"class":"timeout"}`)
	f.do(t, "POST", "/api/upstreams/up-05/disable", "")

	code, hdr, body := f.do(t, "GET", "/api/upstreams", "")
	if code != http.StatusOK || len(listNames(t, body)) != 33 || hdr.Get("X-Total-Count") != "33" {
		t.Fatalf("no parameters: %d, %d records, X-Total-Count %q; want every record (33)", code, len(listNames(t, body)), hdr.Get("X-Total-Count"))
	}

	tests := []struct {
		query string
		want  []string
		total int // X-Total-Count; -1: len(want)
	}{
		{"state=cooling", []string{"up-03", "up-04"}, -1},
		{"state=cooling,disabled", []string{"up-03", "up-04", "up-05"}, -1},
		{"state=cooling&state=disabled", []string{"up-03", "up-04", "up-05"}, -1},
		{"state=disabled&reason=operator", []string{"up-05"}, -1},
		{"reason=timeout", []string{"up-04"}, -1},
		{"state=eligible&tag=dc&tag=odd", []string{"up-09", "up-15", "up-21", "up-27"}, -1},
		{"tag=dc,odd&limit=2", []string{"up-03", "up-09"}, 5},
		{"tag=dc,odd&offset=4&limit=2", []string{"up-27"}, 5},
		{"tag=dc,odd&offset=9", []string{}, 5},
		{"q=UP-1", []string{"up-10", "up-11", "up-12", "up-13", "up-14", "up-15", "up-16", "up-17", "up-18", "up-19"}, -1},
		{"q=127.0.0.1:10021", []string{"up-21"}, -1},     // the URL matches too
		{"q=seller", []string{"127.0.0.9:1111"}, -1},     // the user name is in the redacted URL
		{"q=" + url.QueryEscape(canary), []string{}, -1}, // the password is not
		{"state=probe_allowed", []string{}, -1},
		{"limit=0", nil, 33}, // 0: no limit
	}
	for _, tt := range tests {
		code, hdr, body := f.do(t, "GET", "/api/upstreams?"+tt.query, "")
		if code != http.StatusOK {
			t.Errorf("?%s: %d %s", tt.query, code, body)
			continue
		}
		got := listNames(t, body)
		if tt.want != nil && !slices.Equal(got, tt.want) {
			t.Errorf("?%s: %v, want %v", tt.query, got, tt.want)
		}
		total := tt.total
		if total < 0 {
			total = len(tt.want)
		}
		if hdr.Get("X-Total-Count") != fmt.Sprint(total) {
			t.Errorf("?%s: X-Total-Count %q, want %d", tt.query, hdr.Get("X-Total-Count"), total)
		}
	}

	// /api/status: the same selection, totals over the whole pool.
	code, _, body = f.do(t, "GET", "/api/status?state=cooling&limit=1", "")
	var st statusJSON
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != http.StatusOK {
		t.Fatalf("/api/status: %d %v %s", code, err, body)
	}
	if st.Total != 33 || st.Matched != 2 || len(st.Upstreams) != 1 || st.Upstreams[0].Name != "up-03" {
		t.Errorf("/api/status?state=cooling&limit=1: total %d matched %d page %d; want 33, 2, [up-03]", st.Total, st.Matched, len(st.Upstreams))
	}
	if st.States["cooling"] != 2 || st.States["disabled"] != 1 || st.States["eligible"] != 30 {
		t.Errorf("/api/status states %v: want every record counted (cooling 2, disabled 1, eligible 30)", st.States)
	}
}

func TestAdminListBadParameters(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, tt := range []struct{ query, want string }{
		{"state=dead", `state: unknown state \"dead\"`},
		{"reason=broken", `reason: unknown class \"broken\"`},
		{"reason=none", `reason: unknown class \"none\"`},
		{"limit=-1", `limit: want a whole number`},
		{"offset=ten", `offset: want a whole number`},
		{"sate=cooling", `unknown parameter \"sate\"`},
		{"state=%1b%5b31m", `unknown state \" [31m\"`}, // control bytes are not echoed
	} {
		for _, path := range []string{"/api/upstreams", "/api/status"} {
			code, _, body := f.do(t, "GET", path+"?"+tt.query, "")
			if code != http.StatusBadRequest || !strings.Contains(body, tt.want) {
				t.Errorf("%s?%s: %d %s; want 400 with %s", path, tt.query, code, body, tt.want)
			}
		}
	}
}

// TestStatusPageLargePool: the page lists statusPageRows records, says how
// many it leaves out, and selects by ?state= and ?q=.
func TestStatusPageLargePool(t *testing.T) {
	var b strings.Builder
	b.WriteString(adminConfig)
	for i := range statusPageRows + 100 {
		fmt.Fprintf(&b, "\n[[upstream]]\nurl = \"socks5://127.0.%d.%d:1080\"\nname = \"bulk-%04d\"\n", i/250, i%250+1, i)
	}
	f := newAdminFixture(t, b.String(), fixedClock())
	f.do(t, "POST", "/api/upstreams/bulk-0550/disable", "")
	rowRE := regexp.MustCompile(`<details class="up" data-name="([^"]+)"`)

	_, _, body := f.do(t, "GET", "/", "")
	if n := len(rowRE.FindAllString(body, -1)); n != statusPageRows {
		t.Errorf("page lists %d rows, want %d", n, statusPageRows)
	}
	if want := moreText(statusPageRows, statusPageRows+102); !strings.Contains(body, `<div class="note" id="more">`+want+`</div>`) {
		t.Errorf("page does not say %q", want)
	}
	if !regexp.MustCompile(`class="card disabled" data-state="disabled" aria-pressed="false"[^>]*><b>1</b>`).MatchString(body) {
		t.Errorf("the disabled card does not count the whole pool")
	}

	_, _, body = f.do(t, "GET", "/?state=disabled", "")
	if rows := rowRE.FindAllStringSubmatch(body, -1); len(rows) != 1 || rows[0][1] != "bulk-0550" {
		t.Errorf("/?state=disabled lists %v, want [bulk-0550]", rows)
	}
	if !regexp.MustCompile(`data-state="disabled" aria-pressed="true"`).MatchString(body) ||
		!strings.Contains(body, `<div class="note" id="more" hidden></div>`) {
		t.Errorf("/?state=disabled: card not pressed or note shown")
	}

	_, _, body = f.do(t, "GET", "/?q=BULK-059", "")
	if rows := rowRE.FindAllString(body, -1); len(rows) != 10 || !strings.Contains(body, `value="BULK-059"`) {
		t.Errorf("/?q=BULK-059 lists %d rows (want 10) or lost the search text", len(rows))
	}
	_, _, body = f.do(t, "GET", "/?q=nothing-like-this", "")
	if !strings.Contains(body, `<div class="empty">No upstream matches.</div>`) {
		t.Errorf("an empty selection does not say so")
	}
	// A state the page cannot use is ignored (a person typed it).
	if code, _, body := f.do(t, "GET", "/?state=bogus", ""); code != http.StatusOK || len(rowRE.FindAllString(body, -1)) != statusPageRows {
		t.Errorf("/?state=bogus: %d", code)
	}
}

// TestStatusPageLargePoolInBrowser runs the page's script on a pool larger
// than one page: its refresh keeps the selection of the address (?state=),
// a link to an upstream beyond the first page (/#name) finds it through
// the search, and the note says how many are left out. Opt-in like
// TestStatusPageInBrowser (ROTOR_BROWSER=1).
func TestStatusPageLargePoolInBrowser(t *testing.T) {
	chromium := browserOrSkip(t)
	var b strings.Builder
	b.WriteString(adminConfig)
	for i := range statusPageRows + 100 {
		fmt.Fprintf(&b, "\n[[upstream]]\nurl = \"socks5://127.0.%d.%d:1080\"\nname = \"bulk-%04d\"\n", i/250, i%250+1, i)
	}
	srv := startAdminServer(t, b.String())
	srv.tr.Disable(srv.pool.Lookup("bulk-0550").Record(), "test")
	base := "http://" + srv.Addr("admin")
	rowRE := regexp.MustCompile(`<details class="up" data-name="([^"]+)"[^>]*>`)
	refreshed := regexp.MustCompile(`<body[^>]* data-refreshed="[1-9]`)

	dom := dumpDOM(t, chromium, base+"/?state=disabled")
	if rows := rowRE.FindAllStringSubmatch(dom, -1); !refreshed.MatchString(dom) || len(rows) != 1 || rows[0][1] != "bulk-0550" {
		t.Errorf("/?state=disabled after the script's refresh: %d rows, want bulk-0550 only", len(rows))
	}

	dom = dumpDOM(t, chromium, base+"/#bulk-0599")
	rows := rowRE.FindAllStringSubmatch(dom, -1)
	if !refreshed.MatchString(dom) || len(rows) != 1 || rows[0][1] != "bulk-0599" || !strings.Contains(rows[0][0], " open") {
		first := ""
		if len(rows) > 0 {
			first = rows[0][0]
		}
		t.Errorf("/#bulk-0599 after the refresh: %d rows, the first %s; want bulk-0599 alone, open", len(rows), first)
	}

	dom = dumpDOM(t, chromium, base+"/")
	if n := len(rowRE.FindAllString(dom, -1)); !refreshed.MatchString(dom) || n != statusPageRows ||
		!strings.Contains(dom, `<div class="note" id="more">`+moreText(statusPageRows, statusPageRows+102)+`</div>`) {
		t.Errorf("/ after the refresh: %d rows or no note saying how many are left out", n)
	}
}

// TestProbeBacklogWarning: new upstreams that will wait over a minute for
// their first probe (count / probe.rate) are warned about once per apply,
// with the way out; a pool admitted unprobed, or probed fast enough, is not.
func TestProbeBacklogWarning(t *testing.T) {
	// pool lists n upstreams, the last `disabled` of them disabled.
	pool := func(n, disabled int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "\n[[upstream]]\nurl = \"socks5://127.0.%d.%d:1080\"\n", i/250, i%250+1)
			if i >= n-disabled {
				b.WriteString("disabled = true\n")
			}
		}
		return b.String()
	}
	base := "[listen]\nsocks5 = \"127.0.0.1:0\"\n"
	tests := []struct {
		name, text string
		warn       string // "" for no warning
	}{
		{"700 at the default 10/s", base + pool(700, 0), `"upstreams":700,"probe_rate":10,"at_least":"1m10s"`},
		{"500 at the default 10/s", base + pool(500, 0), ""},
		{"700 at 50/s", base + "[probe]\nrate = 50\n" + pool(700, 0), ""},
		{"700 admitted unprobed", base + "[pool]\nstart_eligible = true\n" + pool(700, 0), ""},
		{"700, 200 of them disabled", base + pool(700, 200), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, logs := newGateway(t, "rotor.toml", tt.text)
			var warns []string
			for _, line := range strings.Split(logs.String(), "\n") {
				if strings.Contains(line, "first probe") {
					warns = append(warns, line)
				}
			}
			switch {
			case tt.warn == "" && len(warns) > 0:
				t.Errorf("unexpected warning %s", warns[0])
			case tt.warn != "" && (len(warns) != 1 || !strings.Contains(warns[0], tt.warn) ||
				!strings.Contains(warns[0], `"level":"warn"`) || !strings.Contains(warns[0], "pool.start_eligible")):
				t.Errorf("warnings %q, want one with %s", warns, tt.warn)
			}
		})
	}
}

// TestAddedUpstreamsLogged: a config load that adds (or removes) a few
// upstreams logs one line each; a list, one summary with the count by state.
func TestAddedUpstreamsLogged(t *testing.T) {
	pool := func(n int) string {
		var b strings.Builder
		b.WriteString("[listen]\nsocks5 = \"127.0.0.1:0\"\n")
		for i := range n {
			fmt.Fprintf(&b, "\n[[upstream]]\nurl = \"socks5://127.0.0.%d:1080\"\n", i+1)
			if i == 0 {
				b.WriteString("disabled = true\n")
			}
		}
		return b.String()
	}
	_, logs := newGateway(t, "rotor.toml", pool(3))
	if n := strings.Count(logs.String(), `{"level":"info","upstream":`); n != 3 ||
		!strings.Contains(logs.String(), `{"level":"info","upstream":"127.0.0.1:1080","to":"disabled","message":"upstream added"}`) ||
		!strings.Contains(logs.String(), `{"level":"info","upstream":"127.0.0.2:1080","to":"probe_allowed","message":"upstream added"}`) {
		t.Errorf("3 added: %d lines, want one each with its state:\n%s", n, logs)
	}
	srv, logs := newGateway(t, "rotor.toml", pool(changedLogEach+1))
	if strings.Contains(logs.String(), `{"level":"info","upstream":`) ||
		!strings.Contains(logs.String(), `{"level":"info","upstreams":21,"first":["127.0.0.1:1080","127.0.0.2:1080","127.0.0.3:1080","127.0.0.4:1080","127.0.0.5:1080"],"probe_allowed":20,"disabled":1,"message":"upstreams added"}`) {
		t.Errorf("21 added: want one summary line:\n%s", logs)
	}

	// Removals: the same, with the state each was in.
	reload := func(text string) string {
		t.Helper()
		cfg, err := ParseConfig("rotor.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		start := len(logs.String())
		if err := srv.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		return logs.String()[start:]
	}
	out := reload(pool(changedLogEach + 3)) // two added
	if strings.Count(out, `"message":"upstream added"`) != 2 {
		t.Errorf("2 added by a reload:\n%s", out)
	}
	out = reload(pool(2)) // 21 removed: 127.0.0.3 .. 127.0.0.23
	if !strings.Contains(out, `{"level":"info","upstreams":21,"first":["127.0.0.3:1080","127.0.0.4:1080","127.0.0.5:1080","127.0.0.6:1080","127.0.0.7:1080"],"probe_allowed":21,"stage":"operator","message":"upstreams removed from config"}`) ||
		strings.Contains(out, `{"level":"info","upstream":`) {
		t.Errorf("21 removed: want one summary line:\n%s", out)
	}
	out = reload(pool(1)) // 127.0.0.2 removed
	if !strings.Contains(out, `{"level":"info","upstream":"127.0.0.2:1080","from":"probe_allowed","stage":"operator","message":"upstream removed from config"}`) {
		t.Errorf("1 removed: want its line with the state it was in:\n%s", out)
	}
}

// TestAdminListUndecodableQuery: a query string url.ParseQuery cannot read
// (a bad percent escape, ";" between parameters) was dropped by
// r.URL.Query(), and the list answered 200 with the whole pool; it is a
// 400 naming the problem, on /api/upstreams and /api/status alike. The
// status page still ignores what it cannot use (a person typed it).
func TestAdminListUndecodableQuery(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, tt := range []struct{ query, want string }{
		{"q=%zz", `query: invalid escape "%zz"`},
		{"state=cooling&q=%zz", `query: invalid escape "%zz"`},
		{"q=dc%2", `query: invalid escape "%2"`},
		{"limit=1;offset=0", `query: parameters are separated by &, not ;`},
		{"state=cooling;disabled", `query: parameters are separated by &, not ;`},
	} {
		for _, path := range []string{"/api/upstreams", "/api/status"} {
			t.Run(path+"?"+tt.query, func(t *testing.T) {
				code, hdr, body := f.do(t, "GET", path+"?"+tt.query, "")
				if code != http.StatusBadRequest {
					t.Fatalf("%d (%d bytes, X-Total-Count %q); want 400 with %s", code, len(body), hdr.Get("X-Total-Count"), tt.want)
				}
				assertJSONError(t, hdr, body)
				var e struct{ Error string }
				if _ = json.Unmarshal([]byte(body), &e); !strings.HasPrefix(e.Error, tt.want) {
					t.Fatalf("error %q; want %s", e.Error, tt.want)
				}
				if hdr.Get("X-Total-Count") != "" {
					t.Errorf("X-Total-Count %q on a refused query", hdr.Get("X-Total-Count"))
				}
			})
		}
	}
	// Good escapes still decode: "dc%2D1" is q=dc-1.
	if code, hdr, body := f.do(t, "GET", "/api/upstreams?q=dc%2D1", ""); code != http.StatusOK || hdr.Get("X-Total-Count") != "1" {
		t.Errorf("?q=dc%%2D1: %d X-Total-Count %q %s; want 200 and dc-1 alone", code, hdr.Get("X-Total-Count"), body)
	}
	if code, _, body := f.do(t, "GET", "/?q=%zz", ""); code != http.StatusOK {
		t.Errorf("status page /?q=%%zz: %d %s; want 200 (the page ignores what it cannot use)", code, body)
	}
}
