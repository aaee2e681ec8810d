package gateway

import (
	"strings"
	"testing"
)

// TestConfigProbeURLPortAtItsLine: a [probe] url with a port out of range
// passed -check, and at run time every upstream was cooled with
// "invalid target address" for rotor's own mistake. It is refused at the
// url's line, as an upstream URL's port is.
func TestConfigProbeURLPortAtItsLine(t *testing.T) {
	for _, u := range []string{"http://localhost:99999/", "http://localhost:0/", "https://localhost:65536/health"} {
		t.Run(u, func(t *testing.T) {
			text := "[probe]\nexpect_status = [200]\nurl = " + tomlString(u) + "\n\n[[upstream]]\nurl = \"direct://\"\n"
			_, err := ParseConfig("p.toml", []byte(text))
			if err == nil || !strings.Contains(err.Error(), "p.toml:3: probe.url: invalid port (want 1-65535)") {
				t.Errorf("err = %v, want p.toml:3: probe.url: invalid port (want 1-65535)", err)
			}
		})
	}
}
