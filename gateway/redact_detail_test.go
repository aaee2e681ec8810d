package gateway

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

// TestDetailScrubber: a record's detail carries text the upstream sent
// (a reason phrase echoing rotor's request), and the admin API and the
// state file hid only the upstream's password as it is. detailScrubber
// hides every form rotor sends it in, the header values and tokens
// redactText finds, and a secret cut at the detail's bound.
func TestDetailScrubber(t *testing.T) {
	const pw = "Ht/Tp Pw@1"
	ui := url.UserPassword("bob", pw)
	token := base64.StdEncoding.EncodeToString([]byte("bob:" + pw))
	scrub := detailScrubber(ui)
	tests := []struct {
		name, in, want string
	}{
		{"as it is", "pw " + pw + " end", "pw xxxxx end"},
		{"query-escaped", "pw " + url.QueryEscape(pw) + " end", "pw xxxxx end"},
		{"path-escaped", "pw " + url.PathEscape(pw) + " end", "pw xxxxx end"},
		{"userinfo-escaped", "pw " + strings.TrimPrefix(url.UserPassword("", pw).String(), ":") + " end", "pw xxxxx end"},
		{"basic token", "Basic " + token + " end", "Basic xxxxx end"},
		{"basic token unpadded", "x" + strings.TrimRight(token, "=") + "!", "x" + "xxxxx" + "!"},
		{"proxy-authorization header", `"407 Proxy-Authorization: Basic abc" (x)`, `"407 Proxy-Authorization: Basic xxxxx" (x)`},
		{"authorization header", "Authorization: Bearer t0k3n", "Authorization: Bearer xxxxx"},
		{"url userinfo", "dial socks5://bob:other@h:1: refused", "dial socks5://bob:xxxxx@h:1: refused"},
		{"a secret cut at the bound", "echo Ht/Tp…", "echo xxxxx…"},
		{"a token cut at the bound", "echo " + token[:6] + "…", "echo xxxxx…"},
		{"other text stays", "dial tcp 127.0.0.1:1: connect: connection refused", "dial tcp 127.0.0.1:1: connect: connection refused"},
		{"other text cut stays", "connection ref…", "connection ref…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scrub(tt.in); got != tt.want {
				t.Errorf("scrub(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	// Without credentials (direct, user only) what needs no secret is
	// still hidden.
	for _, ui := range []*url.Userinfo{nil, url.User("bob")} {
		if got, want := detailScrubber(ui)("Proxy-Authorization: Basic "+token), "Proxy-Authorization: Basic xxxxx"; got != want {
			t.Errorf("detailScrubber(%v) = %q, want %q", ui, got, want)
		}
	}
}
