package gateway

import (
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"socks5 user and password", "socks5://u:canary-pw-1234@10.0.0.1:1080", "socks5://u:xxxxx@10.0.0.1:1080"},
		{"http with path", "http://u:pw@h:3128/x?y=1", "http://u:xxxxx@h:3128/x?y=1"},
		{"password holding @", "socks5://u:can@ry-pw@h:1080", "socks5://u:xxxxx@h:1080"},
		{"percent-encoded password", "socks5://u:p%40ss@h:1080", "socks5://u:xxxxx@h:1080"},
		{"empty password", "socks5://u:@h:1080", "socks5://u:xxxxx@h:1080"},
		{"user only stays", "socks5://scraper@h:1080", "socks5://scraper@h:1080"},
		{"no userinfo", "socks5://10.0.0.1:1080", "socks5://10.0.0.1:1080"},
		{"direct", "direct://", "direct://"},
		{"unparseable port", "socks5://u:canary-pw-1234@h:notaport", "socks5://u:xxxxx@h:notaport"},
		{"password with space", "http://u:my secret@h:1", "http://u:xxxxx@h:1"},
		// The userinfo ends at the last '@' even after a '/': a password
		// may hold '/', and upstream URLs have no path to lose.
		{"@ after a slash is taken for userinfo", "http://h:1/a@b", "http://h:xxxxx@xxxxx"},
		{"# in password", "socks5://u2:Hash#Secret9@127.0.0.1:18102", "socks5://u2:xxxxx@127.0.0.1:18102"},
		{"? in password", "socks5://u:PWQ?x@127.0.0.1:18102", "socks5://u:xxxxx@127.0.0.1:18102"},
		{"/ in password", "socks5://u:a/b@h:1", "socks5://u:xxxxx@h:1"},
		{"seller and userinfo at once", "socks5://u:12:34@h:1", "socks5://xxxxx"},
		{"seller password holding @", "h:1080:u:p@ss", "xxxxx"},
		{"scheme-less user only", "scraper@h:1", "xxxxx@h:1"},
		{"not a scheme before ://", "u:pw://x@h:1", "xxxxx@h:1"},
		{"seller user:pass@host:port", "scraper:canary-pw-1234@10.0.0.1:1080", "xxxxx@10.0.0.1:1080"},
		{"seller host:port:user:pass", "10.0.0.1:1080:scraper:canary-pw-1234", "10.0.0.1:1080:xxxxx"},
		{"seller ipv6 host:port:user:pass", "[2001:db8::1]:1080:u:canary", "[2001:db8::1]:1080:xxxxx"},
		{"seller line behind a scheme", "socks5://10.0.0.1:1080:scraper:canary-pw-1234", "socks5://10.0.0.1:1080:xxxxx"},
		{"the same with a path", "http://10.0.0.1:80:u:canary/x", "http://10.0.0.1:80:xxxxx"},
		{"password without a host", "socks5://u:pw", "socks5://u:xxxxx"},
		{"password without a host, after an @", "socks5://u:a@b", "socks5://u:xxxxx@xxxxx"},
		{"bad port kept after an @", "socks5://u:pw@h:notaport", "socks5://u:xxxxx@h:notaport"},
		// A URL missing its port keeps its host when it cannot be a piece
		// of the password (bug: "https://user:xxxxx@xxxxx": missing port).
		{"no port, IPv4 host", "https://user:pw@127.0.0.1", "https://user:xxxxx@127.0.0.1"},
		{"no port, IPv4 host, slash", "https://user:pw@127.0.0.1/", "https://user:xxxxx@127.0.0.1/"},
		{"no port, dotted name", "http://user:pw@proxy.example.com", "http://user:xxxxx@proxy.example.com"},
		{"no port, localhost", "socks5://user:pw@localhost", "socks5://user:xxxxx@localhost"},
		{"no port, bracketed IPv6", "socks5://user:pw@[2001:db8::1]", "socks5://user:xxxxx@[2001:db8::1]"},
		{"no port, password holding @", "socks5://u:Wq8f@Lk4g@10.0.0.1", "socks5://u:xxxxx@10.0.0.1"},
		{"no port, a single word stays hidden", "socks5://u:Wq8f@Lk4g", "socks5://u:xxxxx@xxxxx"},
		{"no port, unbracketed IPv6 stays hidden", "socks5://u:pw@dead::beef", "socks5://u:xxxxx@xxxxx"},
		{"no port, numeric last label stays hidden", "socks5://u:pw@1.2.3.999", "socks5://u:xxxxx@xxxxx"},
		{"no port, empty port", "socks5://u:pw@10.0.0.1:", "socks5://u:xxxxx@10.0.0.1:"},
		{"no port, a bad port stays hidden", "socks5://u:pw@10.0.0.1:#x", "socks5://u:xxxxx@xxxxx"},
		{"plain host:port", "10.0.0.1:1080", "10.0.0.1:1080"},
		{"bracketed host:port", "[::1]:1080", "[::1]:1080"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redactURL(tt.in); got != tt.want {
				t.Errorf("redactURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestRedactText(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{"url in a message", `upstream: invalid url "socks5://u:canary-pw-1234@h:x"`, nil,
			`upstream: invalid url "socks5://u:xxxxx@h:x"`},
		{"two urls", "a http://u:p1@h:1 b socks5://v:p2@g:2 c", nil,
			"a http://u:xxxxx@h:1 b socks5://v:xxxxx@g:2 c"},
		{"password holding @", `parse "socks5://u:can@ry-pw-1234@h:x": invalid port`, nil,
			`parse "socks5://u:xxxxx@h:x": invalid port`},
		{"escaped quote in password", `parse "socks5://u:p\"canary@h:x": bad`, nil,
			`parse "socks5://u:xxxxx@h:x": bad`},
		{"mail address after url is not userinfo", `"socks5://h:1" rejected; ask ops@example.com`, nil,
			`"socks5://h:1" rejected; ask ops@example.com`},
		{"explicit secret", "auth failed for scraper:canary-pw-1234", []string{"canary-pw-1234"},
			"auth failed for scraper:xxxxx"},
		{"percent-encoded secret", "dial socks5://u:p%40ss-canary@h:1 and p%40ss-canary", []string{"p@ss-canary"},
			"dial socks5://u:xxxxx@h:1 and xxxxx"},
		{"short secret kept", "a b c", []string{"a"}, "a b c"},
		{"empty secret ignored", "text", []string{""}, "text"},
		{"nothing to hide", "dial tcp 127.0.0.1:1: connection refused", nil, "dial tcp 127.0.0.1:1: connection refused"},
		{"trailing scheme", "odd text ://", nil, "odd text ://"},
		{"quoted url, then a colon", `Get "http://127.0.0.1:8080": EOF`, nil, `Get "http://127.0.0.1:8080": EOF`},
		{"url with a path", `Get "http://example.com:80/a:b": EOF`, nil, `Get "http://example.com:80/a:b": EOF`},
		{"host:port and a colon", "proxy socks5://10.0.0.1:80: refused", nil, "proxy socks5://10.0.0.1:80: refused"},
		{"# in a password", `dial "socks5://u2:Hash#Secret9@127.0.0.1:18102": x`, nil, `dial "socks5://u2:xxxxx@127.0.0.1:18102": x`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redactText(tt.in, tt.secrets...); got != tt.want {
				t.Errorf("redactText(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestRedactNeverLeaks checks the property the helpers exist for, over
// shapes a password can take inside a URL.
func TestRedactNeverLeaks(t *testing.T) {
	const canary = "canary-pw-1234"
	shapes := []string{
		"socks5://u:%s@h:1080", "http://u:%s@h:1/p", "https://user:%s@[::1]:443",
		"socks5://u:x@%s@h:1", "socks5://u:%s@h:bad", "socks5h://u:%s@", "u:%s@h:1", "h:1:u:%s",
	}
	for _, sh := range shapes {
		raw := strings.Replace(sh, "%s", canary, 1)
		got := []string{redactURL(raw)}
		if strings.Contains(raw, "://") { // redactText finds URLs by their scheme
			got = append(got, redactText("err: "+raw+" end"))
		}
		for _, got := range got {
			if strings.Contains(got, "canary") || strings.Contains(got, "1234") {
				t.Errorf("%q redacted to %q: the password is still there", raw, got)
			}
		}
	}
}
