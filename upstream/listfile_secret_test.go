package upstream

import (
	"strings"
	"testing"
)

// TestParseListErrorsHidePasswordPieces: a list line's error quoted what
// it took for a port, and dropQuoted cut net/url's quoted text at an
// escaped quote, so pieces of a password reached -check and the log: a
// numeric password of user:pass:host:port (read as host:port:user:pass),
// a password holding '@' on a line without its host, and a password
// holding '"' in a URL without its host. Ports that are numbers of up to
// five digits are still quoted.
func TestParseListErrorsHidePasswordPieces(t *testing.T) {
	tests := []struct {
		line   string
		secret string // must not be in the error
		want   string // the error
	}{
		{"scraper:90817263:10.0.0.1:1080", "90817263", "invalid port: want a number from 1 to 65535"},
		{"socks5://scraper:90817263", "90817263", "invalid port: want a number from 1 to 65535"},
		{"scraper:#?/@%:Ll3a", "Ll3a", "invalid port: want a number from 1 to 65535"},
		{`socks5://scraper:Aa4s"Ss5t'`, "Ss5t", "invalid URL: invalid port after host"},
		{`socks5://scraper:Aa4s"Ss5t"Qq8f`, "Qq8f", "invalid URL: invalid port after host"},
		{"10.0.0.1:0", "", `invalid port "0"`},
		{"10.0.0.1:70000", "", `invalid port "70000"`},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			_, errs := ParseList(strings.NewReader(tt.line+"\n"), "socks5")
			if len(errs) != 1 {
				t.Fatalf("errs = %v, want one", errs)
			}
			msg := errs[0].Err.Error()
			if msg != tt.want {
				t.Errorf("error %q, want %q", msg, tt.want)
			}
			if tt.secret != "" && strings.Contains(msg, tt.secret) {
				t.Errorf("error %q shows %q of the password", msg, tt.secret)
			}
		})
	}
}
