package upstream

import "testing"

// TestSessionID: a session's key names its client user, so the same id
// under two users is two sessions, and stays unambiguous (the id holds
// no "-", the username's separator).
func TestSessionID(t *testing.T) {
	for _, tc := range []struct{ user, id, want string }{
		{"scraper", "1", "scraper-session-1"},
		{"bob", "1", "bob-session-1"},
		{"my-user", "job_1", "my-user-session-job_1"},
		{"", "a1", "a1"},
		{"scraper", "", ""},
	} {
		if got := SessionID(tc.user, tc.id); got != tc.want {
			t.Errorf("SessionID(%q, %q) = %q, want %q", tc.user, tc.id, got, tc.want)
		}
	}
}
