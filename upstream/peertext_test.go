package upstream

import (
	"encoding/base64"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHideCredentials(t *testing.T) {
	token := base64.StdEncoding.EncodeToString([]byte("bob:HtTpPw")) // Ym9iOkh0VHBQdw==
	tests := []struct {
		name, in, want string
	}{
		{"proxy-authorization header", "407 GET / HTTP/1.1 Proxy-Authorization: Basic " + token + " Accept: */*",
			"407 GET / HTTP/1.1 Proxy-Authorization: Basic xxxxx"},
		{"header name in any case", "proxy-AUTHORIZATION:basic " + token, "proxy-AUTHORIZATION:basic xxxxx"},
		{"authorization, another scheme", "Authorization: Bearer abc.def-ghi", "Authorization: Bearer xxxxx"},
		{"a value with no scheme", "Authorization: s3cret-value", "Authorization: xxxxx"},
		{"ends at a line end", "Proxy-Authorization: Basic abc\r\nHost: h", "Proxy-Authorization: Basic xxxxx\r\nHost: h"},
		{"ends at a quote that is not escaped", `with "407 Proxy-Authorization: Digest u=\"bob\", r=x" (ERR_X)`,
			`with "407 Proxy-Authorization: Digest xxxxx" (ERR_X)`},
		{"an empty value stays empty", "Proxy-Authorization:", "Proxy-Authorization:"},
		{"a quoted value", `Authorization: "s3cret" next`, `Authorization: "xxxxx" next`},
		{"a Basic token anywhere", "denied " + token + " here", "denied xxxxx here"},
		{"unpadded", "t=" + strings.TrimRight(token, "="), "t=xxxxx"},
		{"url-safe alphabet", base64.URLEncoding.EncodeToString([]byte("u:>>?>?")), "xxxxx"},
		{"cut short, still user:pass", "x " + token[:8], "x xxxxx"},
		{"words that are no token stay", "connection refused ERR_CONNECT_FAIL dGVzdGluZw== /api/upstreams/dc-1",
			"connection refused ERR_CONNECT_FAIL dGVzdGluZw== /api/upstreams/dc-1"},
		{"nothing to hide", "407 Proxy Authentication Required", "407 Proxy Authentication Required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := HideCredentials(tt.in); got != tt.want {
				t.Errorf("HideCredentials(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPeerText(t *testing.T) {
	long := "407 " + strings.Repeat("é", 200)
	got := PeerText(long)
	if len(got) > maxPeerText || !utf8.ValidString(got) || !strings.HasPrefix(got, "407 éé") {
		t.Errorf("PeerText of %d bytes: %d bytes %q, want at most %d, cut at a character", len(long), len(got), got, maxPeerText)
	}
	if got, want := PeerText("a\x00b\x7fc\r\nd HtTpPw Pw", "HtTpPw", "Pw"), "a?b?c??d xxxxx Pw"; got != want {
		t.Errorf("PeerText = %q, want %q", got, want)
	}
}

// TestConnectStatusErrorHidesEcho: the plain-HTTP path builds a
// ConnectStatusError from the proxy's status line as it came (gateway
// forward.go), and its Error showed the whole reason phrase: an upstream
// echoing the request put rotor's Proxy-Authorization into the detail,
// the log and the API, without bound. Error shows the text through
// PeerText.
func TestConnectStatusErrorHidesEcho(t *testing.T) {
	token := base64.StdEncoding.EncodeToString([]byte("bob:HtTpPw"))
	e := &ConnectStatusError{StatusCode: 407, Plain: true,
		Status:     "407 Proxy-Authorization: Basic " + token + " " + strings.Repeat("x", 4096),
		SquidError: "ERR_CACHE_ACCESS_DENIED " + token}
	got := e.Error()
	if strings.Contains(got, strings.TrimRight(token, "=")) || strings.Contains(got, token[:8]) {
		t.Errorf("Error() shows the token: %.300q", got)
	}
	if len(got) > 2*maxPeerText+100 {
		t.Errorf("Error() is %d bytes, want the reason phrase bounded", len(got))
	}
	if want := `proxy answered the forwarded request with "407 Proxy-Authorization: Basic xxxxx`; !strings.HasPrefix(got, want) {
		t.Errorf("Error() = %.300q, want it to start with %q", got, want)
	}
}
