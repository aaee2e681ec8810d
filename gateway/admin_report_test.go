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
