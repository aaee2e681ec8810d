package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAdminPostRefusesParameters: the POST actions (disable, enable,
// report) take their fields in the JSON body and no query parameters;
// they accepted any silently (?detail=why was a 200 that kept no detail,
// ?dry_run=1 disabled the upstream), while the GET endpoints answer 400
// for one they do not know. Now a parameter is a 400 that names it, and
// the action is not done.
func TestAdminPostRefusesParameters(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, tt := range []struct{ query, want string }{
		{"detail=why", `unknown parameter "detail"`},
		{"dry_run=1", `unknown parameter "dry_run"`},
		{"q=%zz", `query: invalid escape "%zz"`},
		{"&x", `unknown parameter "x"`},
	} {
		for _, action := range []struct{ path, body string }{
			{"disable", `{"detail": "maintenance"}`},
			{"enable", ""},
			{"report", `{"class": "refused"}`},
		} {
			code, hdr, body := f.do(t, "POST", "/api/upstreams/dc-1/"+action.path+"?"+tt.query, action.body)
			if code != http.StatusBadRequest {
				t.Errorf("%s ?%s: %d %s; want 400", action.path, tt.query, code, body)
				continue
			}
			assertJSONError(t, hdr, body)
			var e struct{ Error string }
			if _ = json.Unmarshal([]byte(body), &e); !strings.Contains(e.Error, tt.want) {
				t.Errorf("%s ?%s: error %q; want %s", action.path, tt.query, e.Error, tt.want)
			}
		}
	}
	// Nothing was done.
	if rec := f.record(t, "dc-1"); rec["state"] == "disabled" || rec["state"] == "cooling" {
		t.Errorf("dc-1 is %v after refused actions", rec["state"])
	}
	for _, path := range []string{"/api/upstreams/dc-1/disable", "/api/upstreams/dc-1/enable?"} {
		if code, _, body := f.do(t, "POST", path, ""); code != http.StatusOK {
			t.Errorf("%s: %d %s; want 200", path, code, body)
		}
	}
}
