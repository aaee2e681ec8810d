package gateway

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestLogErrorFieldOneName: every line that carries an error carries it
// under one key, the one zerolog's .Err(err) writes (bug: reload errors,
// tunnel and request lines, skipped list lines and others wrote "err",
// state changes and "start failed" "error"). Lines written with
// Str(errField, …) (the reload's) show errField is that key.
func TestLogErrorFieldOneName(t *testing.T) {
	dead := upstreamtest.ClosedPort(t)
	target := upstreamtest.NewTarget(t)
	srv, logs := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"0s\"\n"+
		"[[upstream]]\nurl = \"socks5://%s\"\nname = \"dead\"\n", dead))
	socksConnect(t, srv.Addr("socks5"), target.Addr())
	eventuallyTrue(t, "the tunnel line", func() bool { return strings.Contains(logs.String(), `"message":"tunnel closed"`) })
	// A rejected reload, with one problem and with several.
	logReloadError(zerolog.New(logs), ConfigErrors{{File: "rotor.toml", Line: 3, Msg: "one"}})
	logReloadError(zerolog.New(logs), ConfigErrors{{File: "rotor.toml", Line: 3, Msg: "one"}, {File: "rotor.toml", Line: 4, Msg: "two"}})

	withError := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if _, ok := m["err"]; ok {
			t.Errorf(`a line with "err": %s`, l)
		}
		if _, ok := m[zerolog.ErrorFieldName]; ok {
			withError[fmt.Sprint(m["message"])] = true
		}
	}
	// A rejected reload's problems are on its "config error" lines, one
	// each, whatever their number; the rejection line has only the count.
	for _, msg := range []string{"tunnel closed", "upstream state changed", "config error"} {
		if !withError[msg] {
			t.Errorf("no %q line carries its error under %q; log:\n%s", msg, zerolog.ErrorFieldName, logs)
		}
	}
}
