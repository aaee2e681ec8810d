package upstream

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// TestConnectWebServerHint: a plain web server configured as an http://
// upstream (it answers an http:// probe's forwarded GET with its own page)
// answers CONNECT with 501; the failure's text says it answered as a web
// server, so the record's detail names the likely cause of its flapping.
// A proxy's refusal (403, squid's 405 with X-Squid-Error) gets no note.
func TestConnectWebServerHint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		squid  string
		want   bool
	}{
		{"501 web server", 501, "", true},
		{"405 web server", 405, "", true},
		{"404 web server", 404, "", true},
		{"403 proxy policy", 403, "", false},
		{"squid 405", 405, "ERR_UNSUP_REQ 0", false},
		{"502 proxy", 502, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodConnect {
					io.WriteString(w, "my own page")
					return
				}
				if tc.squid != "" {
					w.Header().Set("X-Squid-Error", tc.squid)
				}
				w.WriteHeader(tc.status)
			})}
			done := make(chan struct{})
			go func() { // owned by the test: exits when srv is closed
				defer close(done)
				srv.Serve(ln)
			}()
			t.Cleanup(func() { srv.Close(); <-done })

			u, _ := url.Parse("http://" + ln.Addr().String())
			_, err = dial(t, mustDialer(t, u, testCfg()), "example.test:443")
			var f *health.Failure
			if !errors.As(err, &f) {
				t.Fatalf("dial: %v, want a *health.Failure", err)
			}
			got := strings.Contains(err.Error(), "a web server's answer to CONNECT")
			if got != tc.want {
				t.Errorf("text %q: web server note %v, want %v", err.Error(), got, tc.want)
			}
		})
	}
}
