package gateway

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// TestAdminTokenRefusalSaysWhy: a wrong token got the same 401 text as a
// missing one, and neither told a browser user of /?token=, the only way
// the status page logs in. The text now says which, names both ways in,
// and never echoes what was sent.
func TestAdminTokenRefusalSaysWhy(t *testing.T) {
	f := newAdminFixture(t, strings.Replace(adminConfig, "[listen]\n", "[listen]\nadmin_token = \"tok-s3cr3t\"\n", 1), fixedClock())
	tests := []struct {
		name, path string
		hdr        []string
		want       string // prefix of the error text
	}{
		{"api without token", "/api/upstreams", nil, "admin token required"},
		{"page without token", "/", nil, "admin token required"},
		{"api with a wrong bearer", "/api/upstreams", []string{"Authorization", "Bearer tok-WRONG-guess"}, "wrong admin token"},
		{"page with a wrong bearer", "/", []string{"Authorization", "bearer tok-WRONG-guess"}, "wrong admin token"},
		{"page with a wrong ?token=", "/?token=tok-WRONG-guess", nil, "wrong admin token"},
		{"page with an empty ?token=", "/?token=", nil, "admin token required"},
		{"page with a stale cookie", "/", []string{"Cookie", tokenCookie + "=0123abcd-WRONG-guess"}, "wrong admin token"},
		{"basic auth is no bearer", "/api/status", []string{"Authorization", "Basic tok-WRONG-guess"}, "admin token required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, hdr, body := f.do(t, "GET", tt.path, "", tt.hdr...)
			if code != http.StatusUnauthorized {
				t.Fatalf("GET %s: %d, want 401", tt.path, code)
			}
			assertJSONError(t, hdr, body)
			var e struct{ Error string }
			if err := json.Unmarshal([]byte(body), &e); err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(e.Error, tt.want) {
				t.Errorf("error = %q, want it to start with %q", e.Error, tt.want)
			}
			for _, w := range []string{"Authorization: Bearer <token>", "/?token=<token>"} {
				if !strings.Contains(e.Error, w) {
					t.Errorf("error = %q, want it to mention %q", e.Error, w)
				}
			}
			if strings.Contains(body, "WRONG") || strings.Contains(body, "s3cr3t") {
				t.Errorf("body echoes a token: %s", body)
			}
		})
	}
	t.Run("a change with only the page's cookie", func(t *testing.T) {
		code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/disable", "", "Cookie", tokenCookie+"="+cookieValue("tok-s3cr3t"))
		var e struct{ Error string }
		_ = json.Unmarshal([]byte(body), &e)
		if code != http.StatusUnauthorized || !strings.Contains(e.Error, "cookie only reads") || !strings.Contains(e.Error, "Authorization: Bearer <token>") {
			t.Errorf("POST with the cookie: %d %s, want 401 saying the cookie only reads", code, body)
		}
	})
}
