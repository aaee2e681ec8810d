package gateway

import (
	"strings"
	"testing"
)

// TestConfigStatusesNotSuccesses: pool.retry_statuses and
// [target_http_error] statuses refuse 1xx and 2xx at their line. They
// passed -check: retry_statuses = [200] retried every successful
// idempotent request, statuses = [200] counted every 200 as a ban.
func TestConfigStatusesNotSuccesses(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"retry 200", "[pool]\nretry_statuses = [429, 200]\n", "s.toml:2: pool.retry_statuses: 200 is an interim or success status, not a ban (want 300-599)"},
		{"retry 100", "[pool]\nretry_statuses = [100]\n", "s.toml:2: pool.retry_statuses: 100 is an interim or success status"},
		{"ban 200", "[target_http_error]\nstatuses = [200]\n", "s.toml:2: target_http_error.statuses: 200 is an interim or success status, not a ban (want 300-599)"},
		{"ban 204", "# a comment\n[target_http_error]\nscope = \"target\"\nstatuses = [403, 204]\n", "s.toml:4: target_http_error.statuses: 204 is an interim or success status"},
		{"ban 101", "[target_http_error]\nstatuses = [101]\n", "s.toml:2: target_http_error.statuses: 101 is an interim or success status"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("s.toml", []byte(tc.text+"[[upstream]]\nurl = \"direct://\"\n"))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	// What stays valid: redirects (a ban page behind a 302) and errors.
	if _, err := ParseConfig("s.toml", []byte("[pool]\nretry_statuses = [302, 403, 429, 599]\n[target_http_error]\nstatuses = [300, 403, 503]\n[[upstream]]\nurl = \"direct://\"\n")); err != nil {
		t.Errorf("3xx-5xx refused: %v", err)
	}
}
