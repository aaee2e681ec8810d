package health

import (
	"strings"
	"testing"
)

// TestProbeURLRejectsWhatNoProbeCanReach: a [probe] url whose port is out
// of range, whose host cannot go into a proxy request, or whose query
// would break the request line is rotor's own config mistake. It is
// refused at Validate (so -check, start and reload name its line), never
// left to the probes, which would cool every upstream with
// "target_connect: target_unreachable: invalid target address".
func TestProbeURLRejectsWhatNoProbeCanReach(t *testing.T) {
	tests := []struct {
		url  string
		want string // "" = valid
	}{
		{"http://localhost:8080/health", ""},
		{"https://probe.example/", ""},
		{"http://[::1]:80/", ""},
		{"http://127.0.0.1:65535/", ""},
		{"http://h:08/", ""},
		{"http://h/a%20b?x=1&y=%20", ""},
		{"http://localhost:99999/", "invalid port (want 1-65535)"},
		{"http://localhost:0/", "invalid port (want 1-65535)"},
		{"http://localhost:65536/", "invalid port (want 1-65535)"},
		{"https://h:00/", "invalid port (want 1-65535)"},
		{"http://:80/", "missing host"},
		{"http:// /", "invalid character in host name"},
		{"http://a b/", "invalid character in host name"},
		{"http://a<b/", "invalid character '<' in host name"},
		{`http://a"b/`, `invalid character '"' in host name`},
		{"http://[fe80::1%25eth0]/", "zone"},
		{"http://" + strings.Repeat("a", 256) + "/", "host name longer than 255 bytes"},
		{"http://h/?a b", "space in the query"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			err := ProbeConfig{URL: tt.url}.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.want == "":
				if _, err := newProbeSpec(ProbeConfig{URL: tt.url}); err != nil {
					t.Errorf("newProbeSpec: %v", err)
				}
			case err == nil || !strings.Contains(err.Error(), "probe.url: ") || !strings.Contains(err.Error(), tt.want):
				t.Errorf("Validate() = %v, want probe.url: …%s…", err, tt.want)
			default:
				if _, err := newProbeSpec(ProbeConfig{URL: tt.url}); err == nil {
					t.Errorf("newProbeSpec accepted %q", tt.url)
				}
			}
		})
	}
}
