package gateway

import (
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// TestProbeCAFile: an https probe URL whose certificate a private CA
// signed is trusted through probe.ca_file (there was no way: only the
// system's CAs, and every upstream stayed cooling with "certificate signed
// by unknown authority"); -check reports a file that holds no PEM at its line.
func TestProbeCAFile(t *testing.T) {
	target := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	target.Config.ErrorLog = log.New(io.Discard, "", 0)
	target.StartTLS()
	t.Cleanup(target.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "probe-ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: target.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(caLine string) string {
		return "allow_private_destinations = true\n" + listenConf("") + fmt.Sprintf("[probe]\nurl = %q\n%s[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n", target.URL+"/", caLine)
	}
	t.Run("trusted", func(t *testing.T) {
		srv, _ := startGateway(t, conf(fmt.Sprintf("ca_file = %q\n", ca)))
		eventuallyTrue(t, "the probe passed", func() bool { return srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record()).State == health.Eligible })
	})
	t.Run("system CAs only", func(t *testing.T) {
		srv, _ := startGateway(t, conf(""))
		eventuallyTrue(t, "the probe failed", func() bool {
			s := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
			return s.State == health.Cooling && strings.Contains(s.Detail, "certificate")
		})
	})
	t.Run("not PEM", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.pem")
		if err := os.WriteFile(bad, []byte("nope\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		text := conf(fmt.Sprintf("ca_file = %q\n", bad))
		line := strings.Count(text[:strings.Index(text, "ca_file")], "\n") + 1
		_, err := ParseConfig(filepath.Join(dir, "c.toml"), []byte(text))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("c.toml:%d: probe.ca_file:", line)) {
			t.Fatalf("config error %v, want one at probe.ca_file's line", err)
		}
	})
}
