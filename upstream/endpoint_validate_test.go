package upstream

import (
	"net/url"
	"strings"
	"testing"
)

// TestValidateURL: an upstream URL is checked as strictly as a list-file
// line (bug: port 99999, port 0, a path and direct://host passed), and
// the error never shows the password, even when net/url took a part of it
// for the host.
func TestValidateURL(t *testing.T) {
	tests := []struct {
		raw  string
		want string // "" = valid
	}{
		{"socks5://u:pw@127.0.0.1:1080", ""},
		{"socks5h://127.0.0.1:1080", ""},
		{"http://127.0.0.1:3128/", ""},
		{"https://[::1]:443", ""},
		{"HTTP://127.0.0.1:3128", ""},
		{"direct://", ""},
		{"direct:///", ""},
		{"socks5://u:pw@127.0.0.1:99999", `upstream "socks5://u:xxxxx@127.0.0.1:99999": invalid port (want 1-65535)`},
		{"socks5://127.0.0.1:0", "invalid port"},
		{"socks5://127.0.0.1:65536", "invalid port"},
		{"socks5://127.0.0.1:00080", ""},
		{"socks5://127.0.0.1", "missing port"},
		{"socks5://127.0.0.1:", "missing port"},
		{"socks5://[::1]", "missing port"},
		{"socks5://:1080", "missing host"},
		{"https://127.0.0.1:443/path", `upstream "https://127.0.0.1:443": unexpected path, query or fragment`},
		{"http://127.0.0.1:3128?x=1", "unexpected path, query or fragment"},
		{"http://127.0.0.1:3128?", "unexpected path, query or fragment"},
		{"http://127.0.0.1:3128#f", "unexpected path, query or fragment"},
		{"direct://foo:80", `upstream "direct://foo:80": direct:// takes no host`},
		{"direct://u:pw@", "direct:// takes no host"},
		{"direct:///x", "unexpected path"},
		{"ftp://127.0.0.1:21", `unsupported scheme "ftp"`},
		{"127.0.0.1", "missing scheme"},
		{"socks5:opaque", "want socks5://[user:pass@]host:port"},
		// "u:1234#Secret9@h:1" parses as host "u:1234" and fragment
		// "Secret9@h:1": neither may be shown.
		{"socks5://u:1234#Secret9@h:1", `upstream "socks5://xxxxx": '/', '?' or '#' before the '@'`},
		{"socks5://u:1234?Secret9@h:1", `upstream "socks5://xxxxx": '/', '?' or '#' before the '@'`},
		{"socks5://u:1234/Secret9@h:1", `upstream "socks5://xxxxx": '/', '?' or '#' before the '@'`},
		// What NewDialer refuses (RFC 1929 §2) is refused here too (bug:
		// -check said ok, then the pool refused the whole config).
		{"socks5://:pw@127.0.0.1:1080", `upstream "socks5://:xxxxx@127.0.0.1:1080": socks5 username must not be empty`},
		{"socks5h://@127.0.0.1:1080", "socks5 username must not be empty"},
		{"socks5://u:" + strings.Repeat("p", 256) + "@127.0.0.1:1080", `upstream "socks5://u:xxxxx@127.0.0.1:1080": socks5 username and password must be at most 255 bytes`},
		{"socks5://" + strings.Repeat("u", 256) + ":pw@127.0.0.1:1080", "at most 255 bytes"},
		{"socks5://" + strings.Repeat("u", 255) + ":" + strings.Repeat("p", 255) + "@127.0.0.1:1080", ""},
		{"http://:pw@127.0.0.1:3128", ""}, // Basic carries an empty user
		{"https://u:" + strings.Repeat("p", 300) + "@127.0.0.1:443", ""},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			u, err := url.Parse(tt.raw)
			if err != nil {
				t.Fatal(err)
			}
			err = ValidateURL(u)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want == "":
			case err == nil:
				t.Errorf("accepted, want %q", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Errorf("err = %v, want …%s…", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), "pw") || strings.Contains(err.Error(), "1234") || strings.Contains(err.Error(), "Secret9")) {
				t.Errorf("error shows the password: %v", err)
			}
			if cerr := CheckURL(u); (cerr == nil) != (err == nil) || cerr != nil && strings.Contains(cerr.Error(), "1234") {
				t.Errorf("CheckURL = %v, ValidateURL = %v", cerr, err)
			}
		})
	}
}

// TestValidateURLMatchesListFiles: what a list file refuses for its port,
// an [[upstream]] url refuses too.
func TestValidateURLMatchesListFiles(t *testing.T) {
	for _, line := range []string{"socks5://127.0.0.1:99999", "socks5://127.0.0.1:0", "http://127.0.0.1:3128/x"} {
		if _, errs := ParseList(strings.NewReader(line+"\n"), "http"); len(errs) == 0 {
			t.Fatalf("list file accepted %s", line)
		}
		u, err := url.Parse(line)
		if err != nil {
			t.Fatal(err)
		}
		if ValidateURL(u) == nil {
			t.Errorf("ValidateURL accepted %s, which a list file refuses", line)
		}
	}
}
