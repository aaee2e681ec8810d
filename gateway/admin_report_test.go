package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAdminBodyTooLarge: a body over maxReportBody is a 413 naming the
// limit, on every action that takes one, and changes nothing (bug: it was
// a 400 "invalid body: …: http: request body too large", as if the JSON
// were wrong).
func TestAdminBodyTooLarge(t *testing.T) {
	// Well past the limit, yet small enough to sit in loopback socket
	// buffers whole: the client has sent it all before the answer comes.
	big := strings.Repeat("a", 4*maxReportBody)
	tests := []struct{ name, action, body string }{
		{"report, a long detail", "report", `{"class":"refused","detail":"` + big + `"}`},
		{"report, white space after the object", "report", `{"class":"refused"}` + strings.Repeat(" ", 4*maxReportBody)},
		{"disable", "disable", `{"detail":"` + big + `"}`},
		{"enable", "enable", `{` + strings.Repeat(" ", 4*maxReportBody) + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newAdminFixture(t, adminConfig, fixedClock())
			code, hdr, body := f.do(t, "POST", "/api/upstreams/dc-1/"+tt.action, tt.body)
			if code != http.StatusRequestEntityTooLarge {
				t.Fatalf("code = %d, want 413 (%s)", code, body)
			}
			assertJSONError(t, hdr, body)
			var e struct {
				Error string `json:"error"`
			}
			_ = json.Unmarshal([]byte(body), &e)
			if want := "body over 16384 bytes"; !strings.Contains(e.Error, want) {
				t.Errorf("error %q does not say %q", e.Error, want)
			}
			rec := f.record(t, "dc-1")
			if rec["state"] != "eligible" || len(rec["history"].([]any)) != 0 {
				t.Errorf("a refused body changed the record: state %v, history %v", rec["state"], rec["history"])
			}
		})
	}
}

// TestAdminReportBlankTarget: a target field given but blank or null is a
// 400 that changes nothing, while a report without the field is still for
// the whole upstream (bug: "" and "  " were taken as no target, so a
// script whose host variable came out empty cooled the upstream for every
// site, even with scope = "target").
func TestAdminReportBlankTarget(t *testing.T) {
	for _, target := range []string{`""`, `"  "`, `"\t"`, `" \r\n "`, `null`} {
		t.Run(target, func(t *testing.T) {
			f := newAdminFixture(t, adminConfig, fixedClock())
			code, hdr, body := f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"target_http_error","target":`+target+`}`)
			if code != http.StatusBadRequest {
				t.Fatalf("code = %d, want 400 (%s)", code, body)
			}
			assertJSONError(t, hdr, body)
			if !strings.Contains(body, `leave \"target\" out`) {
				t.Errorf("error %s does not say to leave the field out", body)
			}
			rec := f.record(t, "dc-1")
			if rec["state"] != "eligible" || len(rec["history"].([]any)) != 0 || len(rec["failures"].(map[string]any)) != 0 {
				t.Errorf("a refused report changed the record: state %v, failures %v, history %v", rec["state"], rec["failures"], rec["history"])
			}
		})
	}
	t.Run("a target of another type", func(t *testing.T) {
		f := newAdminFixture(t, adminConfig, fixedClock())
		code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"target_http_error","target":5}`)
		if code != http.StatusBadRequest || !strings.Contains(body, "want a JSON string") {
			t.Fatalf("got %d %s, want 400 asking for a JSON string", code, body)
		}
	})
	t.Run("no target field", func(t *testing.T) {
		f := newAdminFixture(t, adminConfig, fixedClock())
		code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"target_http_error","detail":"ban"}`)
		if code != http.StatusOK {
			t.Fatalf("code = %d, want 200 (%s)", code, body)
		}
		rec := f.record(t, "dc-1")
		if rec["state"] != "cooling" || len(rec["targets"].([]any)) != 0 {
			t.Errorf("state %v, targets %v: want the whole upstream cooling", rec["state"], rec["targets"])
		}
	})
	t.Run("white space around a host", func(t *testing.T) {
		f := newAdminFixture(t, adminConfig, fixedClock())
		code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"target_http_error","target":" shop.example "}`)
		if code != http.StatusOK {
			t.Fatalf("code = %d, want 200 (%s)", code, body)
		}
		rec := f.record(t, "dc-1")
		if ts := rec["targets"].([]any); rec["state"] != "eligible" || len(ts) != 1 || ts[0].(map[string]any)["host"] != "shop.example" {
			t.Errorf("state %v, targets %v: want shop.example only", rec["state"], ts)
		}
	})
}

// TestAdminReportTargetNormalised: a reported host is one key whatever its
// case and a trailing dot, the key the data path admits "h.example:443"
// under (bug: "h.example." was stored as a host of its own beside
// "h.example", and a ban reported with the dot kept nothing from it).
func TestAdminReportTargetNormalised(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, target := range []string{"h.example.", "H.Example", "H.EXAMPLE.:443", "https://H.Example./ban"} {
		code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"target_http_error","target":"`+target+`"}`)
		if code != http.StatusOK {
			t.Fatalf("%s: code = %d, want 200 (%s)", target, code, body)
		}
	}
	rec := f.record(t, "dc-1")
	ts := rec["targets"].([]any)
	if len(ts) != 1 || ts[0].(map[string]any)["host"] != "h.example" {
		t.Errorf("targets = %v, want h.example alone", ts)
	}
	for _, h := range rec["history"].([]any) {
		if got := h.(map[string]any)["target"]; got != "h.example" {
			t.Errorf("history entry for target %v, want h.example", got)
		}
	}
	if e := f.srv.pool.Lookup("dc-1"); !f.srv.tr.TargetCooling(e.Record(), "h.example:443") {
		t.Error("a request for h.example:443 is not refused on dc-1")
	}

	// One dot only: a second leaves an empty label, no host name.
	code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"target_http_error","target":"other.example.."}`)
	if code != http.StatusBadRequest {
		t.Errorf("other.example..: code = %d, want 400 (%s)", code, body)
	}
}

// TestAdminReportWholeUpstreamNamesTarget: a report that cools the whole
// upstream keeps the target it named in its history entry's detail (bug:
// the target was dropped, so the operator could not tell which site set it
// off); a report scoped to its target keeps it in the entry's target.
func TestAdminReportWholeUpstreamNamesTarget(t *testing.T) {
	tests := []struct {
		name, config, body string
		wantState          string
		wantDetail         string
		wantTarget         any // the history entry's target; nil when it has none
	}{
		{"a class the upstream's", adminConfig, `{"class":"refused","detail":"exit blocked","target":"Shop.Example:443"}`,
			"cooling", "reported by client for shop.example: exit blocked", nil},
		{"a ban under scope upstream", adminConfig + "\n[target_http_error]\nscope = \"upstream\"\n",
			`{"class":"target_http_error","target":"https://shop.example/ban"}`,
			"cooling", "reported by client for shop.example", nil},
		{"a ban under scope target", adminConfig, `{"class":"target_http_error","detail":"captcha","target":"shop.example"}`,
			"eligible", "reported by client: captcha", "shop.example"},
		{"a slow body under scope target", adminConfig + "\n[slow_body]\nscope = \"target\"\n", `{"class":"slow_body","target":"shop.example"}`,
			"eligible", "reported by client", "shop.example"},
		{"no target", adminConfig, `{"class":"refused","detail":"x"}`, "cooling", "reported by client: x", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newAdminFixture(t, tt.config, fixedClock())
			if code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/report", tt.body); code != http.StatusOK {
				t.Fatalf("code = %d, want 200 (%s)", code, body)
			}
			rec := f.record(t, "dc-1")
			hist := rec["history"].([]any)
			if rec["state"] != tt.wantState || len(hist) != 1 {
				t.Fatalf("state %v, history %v: want %s and one entry", rec["state"], hist, tt.wantState)
			}
			h := hist[0].(map[string]any)
			if h["detail"] != tt.wantDetail || h["target"] != tt.wantTarget {
				t.Errorf("history entry detail %q, target %v; want %q, %v", h["detail"], h["target"], tt.wantDetail, tt.wantTarget)
			}
			if tt.wantState == "cooling" && rec["detail"] != tt.wantDetail {
				t.Errorf("record detail %q, want %q", rec["detail"], tt.wantDetail)
			}
		})
	}
}
