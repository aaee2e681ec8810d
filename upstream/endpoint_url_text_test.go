package upstream

import (
	"net/url"
	"strings"
	"testing"
)

// TestValidateURLDirectHint: "direct:x" (no "//") was told to look like
// direct://[user:pass@]host:port, a shape direct never takes.
func TestValidateURLDirectHint(t *testing.T) {
	tests := []struct{ url, want string }{
		{"direct:x", "want direct:// (direct takes no host, port or credentials)"},
		{"DIRECT:x", "want direct:// (direct takes no host, port or credentials)"},
		{"socks5:h:1", "want socks5://[user:pass@]host:port"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatal(err)
			}
			if err := ValidateURL(u); err == nil || !strings.HasSuffix(err.Error(), tt.want) {
				t.Errorf("ValidateURL(%q) = %v, want …%s", tt.url, err, tt.want)
			}
		})
	}
}
