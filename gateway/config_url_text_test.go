package gateway

import (
	"strings"
	"testing"
)

// TestConfigURLMissingSlashesText: `url = "direct:"` was reported as
// upstream "direct:xxxxx": want scheme://[user:pass@]host:port — a
// password masked that is not there, and a hint that does not fit
// direct. A known scheme missing its "//" (or its ':') is now shown as
// written, with the hint for that scheme; what may hold a password is
// still masked.
func TestConfigURLMissingSlashesText(t *testing.T) {
	tests := []struct {
		url, want string
	}{
		{"direct:", `upstream "direct:": want direct:// (the "//" after "direct:" is missing)`},
		{"DIRECT:", `upstream "DIRECT:": want direct:// (the "//" after "DIRECT:" is missing)`},
		{"direct:/", `upstream "direct:/": want direct:// (the "//" after "direct:" is missing)`},
		{"direct//", `upstream "direct//": want direct:// (the ':' after "direct" is missing)`},
		{"socks5:/x", `upstream "socks5:/x": want socks5://[user:pass@]host:port (the "//" after "socks5:" is missing)`},
		{"socks5:", `upstream "socks5:": want socks5://[user:pass@]host:port (the "//" after "socks5:" is missing)`},
		{"http:/h:1", `upstream "http:/h:1": want http://[user:pass@]host:port (the "//" after "http:" is missing)`},
		{"socks5:127.0.0.1:1080", `upstream "socks5:127.0.0.1:1080": want socks5://[user:pass@]host:port (the "//" after "socks5:" is missing)`},
		{"http//h:1", `upstream "http//h:1": want http://[user:pass@]host:port (the ':' after "http" is missing)`},
		{"https//u:pw@h:1", `want https://[user:pass@]host:port (the ':' after "https" is missing)`},
		{"h:1", `upstream "h:1": want scheme://[user:pass@]host:port (socks5, http, https or direct)`},
		{"127.0.0.1:1080", `upstream "127.0.0.1:1080": want scheme://[user:pass@]host:port (socks5, http, https or direct)`},
		// What may be a password stays hidden.
		{"http:user:S3cretPw", "want http://[user:pass@]host:port"},
		{"socks5:u:S3cretPw@h:1", "want socks5://[user:pass@]host:port"},
		{"https//u:S3cretPw@h:1", "want https://[user:pass@]host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := ParseConfig("u.toml", []byte("[[upstream]]\nurl = "+tomlString(tt.url)+"\n"))
			if err == nil || !strings.HasPrefix(err.Error(), "u.toml:2: ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v\nwant u.toml:2: …%s", err, tt.want)
			}
			if err != nil && (strings.Contains(err.Error(), "S3cretPw") || strings.Contains(err.Error(), "Pw")) {
				t.Errorf("err shows the password: %v", err)
			}
		})
	}
}
