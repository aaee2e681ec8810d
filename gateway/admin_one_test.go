package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAdminOneRefusesParameters: GET /api/upstreams/{name} takes no
// parameters; one it is given is a 400, as the list answers an unknown
// one (issue: ?x=1 was a 200).
func TestAdminOneRefusesParameters(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	for _, tt := range []struct{ query, want string }{
		{"x=1", `unknown parameter "x"`},
		{"state=cooling", `unknown parameter "state"`},
		{"q=%zz", `query: invalid escape "%zz"`},
		{"a;b", `query: parameters are separated by &, not ;`},
		{"&x", `unknown parameter "x"`},
	} {
		for _, method := range []string{"GET", "HEAD"} {
			code, hdr, body := f.do(t, method, "/api/upstreams/dc-1?"+tt.query, "")
			if code != http.StatusBadRequest {
				t.Errorf("%s ?%s: %d %s; want 400", method, tt.query, code, body)
				continue
			}
			if method == "HEAD" {
				continue
			}
			assertJSONError(t, hdr, body)
			var e struct{ Error string }
			if _ = json.Unmarshal([]byte(body), &e); !strings.Contains(e.Error, tt.want) {
				t.Errorf("?%s: error %q; want %s", tt.query, e.Error, tt.want)
			}
		}
	}
	for _, path := range []string{"/api/upstreams/dc-1", "/api/upstreams/dc-1?"} {
		if code, _, body := f.do(t, "GET", path, ""); code != http.StatusOK {
			t.Errorf("%s: %d %s; want 200", path, code, body)
		}
	}
}
