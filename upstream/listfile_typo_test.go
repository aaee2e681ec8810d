package upstream

import (
	"strings"
	"testing"
)

// TestListSchemeTypo: a list line `direct:` said "invalid port: want
// host:port, …" and `http//h:1` said `invalid host "http//h"`, while the
// config's url says what is missing with the scheme's own shape. The
// list now says the same (SchemeTypo), never showing a password; a line
// that is user:pass:host:port with a user "http" still reads so.
func TestListSchemeTypo(t *testing.T) {
	for _, tt := range []struct{ line, want string }{
		{"direct:", `upstream "direct:": want direct:// (the "//" after "direct:" is missing); a list file takes socks5, http or https proxies`},
		{"direct//", `upstream "direct//": want direct:// (the ':' after "direct" is missing); a list file takes socks5, http or https proxies`},
		{"http//h:1", `upstream "http//h:1": want http://[user:pass@]host:port (the ':' after "http" is missing)`},
		{"socks5:/x", `upstream "socks5:/x": want socks5://[user:pass@]host:port (the "//" after "socks5:" is missing)`},
		{"http:/h:1", `upstream "http:/h:1": want http://[user:pass@]host:port (the "//" after "http:" is missing)`},
		{"socks5:127.0.0.1:1080", `upstream "socks5:127.0.0.1:1080": want socks5://[user:pass@]host:port (the "//" after "socks5:" is missing)`},
		// What may hold a password is not shown.
		{"https//u:S3cretPw@h:1", `want https://[user:pass@]host:port (the ':' after "https" is missing)`},
		{"http:user:S3cretPw", `want http://[user:pass@]host:port (the "//" after "http:" is missing)`},
		{"socks5:/u:S3cretPw@h:1", `want socks5://[user:pass@]host:port (the "//" after "socks5:" is missing)`},
	} {
		t.Run(tt.line, func(t *testing.T) {
			entries, errs := ParseList(strings.NewReader(tt.line+"\n"), "http")
			if len(entries) != 0 || len(errs) != 1 {
				t.Fatalf("entries %v errors %v, want one error", entries, errs)
			}
			if got := errs[0].Err.Error(); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
			if strings.Contains(errs[0].Error(), "S3cretPw") {
				t.Errorf("the error shows the password: %v", errs[0])
			}
		})
	}
	// Seller lines whose user is a scheme's name still parse.
	for _, line := range []string{"http:pw:10.0.0.1:8080", "socks5:pw@10.0.0.1:1080", "http://10.0.0.1:8080"} {
		if entries, errs := ParseList(strings.NewReader(line+"\n"), "http"); len(entries) != 1 || len(errs) != 0 {
			t.Errorf("%s: entries %v errors %v, want one entry", line, entries, errs)
		}
	}
}
