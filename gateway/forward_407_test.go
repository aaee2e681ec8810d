package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// Answers of an http:// upstream to a forwarded GET, as squid 5.7 and
// tinyproxy 1.11.1 send them (interop TestSignals target_407_relayed and
// own_407_*): their own 407s and 401, and a target's 407 they relay.
const (
	squidOwn407 = "HTTP/1.1 407 Proxy Authentication Required\r\nServer: squid/5.7\r\nProxy-Authenticate: Basic realm=\"rotor-interop\"\r\n" +
		"X-Squid-Error: ERR_CACHE_ACCESS_DENIED 0\r\nVia: 1.1 rotor-interop (squid/5.7)\r\nX-Cache: MISS from rotor-interop\r\nContent-Length: 0\r\n\r\n"
	squidRelayed407 = "HTTP/1.1 407 Proxy Authentication Required\r\nServer: BaseHTTP/0.6 Python/3.11.2\r\n" +
		"Via: 1.1 rotor-interop (squid/5.7)\r\nX-Cache: MISS from rotor-interop\r\nContent-Length: 10\r\n\r\nsite's 407"
	tinyOwn407 = "HTTP/1.0 407 Proxy Authentication Required\r\nServer: tinyproxy/1.11.1\r\nProxy-Authenticate: Basic realm=\"Tinyproxy\"\r\n" +
		"Content-Type: text/html\r\nConnection: close\r\n\r\n"
	tinyOwn401 = "HTTP/1.0 401 Unauthorized\r\nServer: tinyproxy/1.11.1\r\nWWW-Authenticate: Basic realm=\"Tinyproxy\"\r\n" +
		"Content-Type: text/html\r\nConnection: close\r\n\r\n"
	tinyRelayed407 = "HTTP/1.1 407 Proxy Authentication Required\r\nServer: BaseHTTP/0.6 Python/3.11.2\r\n" +
		"Via: 1.1 vm (tinyproxy/1.11.1)\r\nContent-Length: 10\r\n\r\nsite's 407"
	// A target's 401 through tinyproxy with a forged Server: tinyproxy's
	// Via says it passed through.
	tinyRelayed401 = "HTTP/1.1 401 Unauthorized\r\nServer: tinyproxy/1.11.1\r\nWWW-Authenticate: Basic realm=\"site\"\r\n" +
		"Via: 1.1 vm (tinyproxy/1.11.1)\r\nContent-Length: 10\r\n\r\nsite's 401"
	unmarked407 = "HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"p\"\r\nContent-Length: 0\r\n\r\n"
)

// TestForwarded407Whose: a 407 answering a forwarded request is the
// proxy's rejection of rotor's credentials only when the proxy marks it
// as its own (squid's X-Squid-Error, tinyproxy's Server); one that a
// proxy which marks its own relayed (its Via, no mark) is the target's
// answer, relayed to the client and reported to nobody; one with no mark
// either way is reported as auth_rejected for the host, and the client is
// told it may be either. Issue: a target's 407 relayed by tinyproxy
// (Via: tinyproxy, Server: BaseHTTP) or squid was told as
// "auth_rejected; stage=proxy_auth … the proxy rejected rotor's
// credentials for it" and cooled the upstream for the host for 5 min.
func TestForwarded407Whose(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		relayed      bool // the client gets the target's answer
		unmarked     bool // auth_rejected, said to be maybe the target's
	}{
		{"squid's own 407", squidOwn407, false, false},
		{"tinyproxy's own 407", tinyOwn407, false, false},
		{"tinyproxy's own 401", tinyOwn401, false, false},
		{"a target's 407 relayed by squid", squidRelayed407, true, false},
		{"a target's 407 relayed by tinyproxy", tinyRelayed407, true, false},
		{"a target's 401 relayed by tinyproxy", tinyRelayed401, true, false},
		{"a 407 with no mark", unmarked407, false, true},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+" "+method, func(t *testing.T) {
				proxy := newRawTarget(t, serveAnswers(true, tc.answer))
				srv, _ := startGateway(t, fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\n"+
					"[[upstream]]\nurl = \"http://rotor:up-pw@%s\"\nname = \"tp\"\n", proxy.Addr()))
				resp, body, err := askForward(t, srv, method, "http://example.test/")
				if err != nil {
					t.Fatalf("reading the body: %v", err)
				}
				snap := srv.Tracker().Snapshot(srv.Pool().Lookup("tp").Record())
				if tc.relayed {
					wantStatus := strings.Fields(tc.answer)[1]
					if fmt.Sprint(resp.StatusCode) != wantStatus || !strings.HasPrefix(body, "site's") || resp.Header.Get("X-Rotor-Upstream") != "tp" {
						t.Errorf("got %s %q (X-Rotor-Upstream %q), want the target's %s relayed", resp.Status, body, resp.Header.Get("X-Rotor-Upstream"), wantStatus)
					}
					if snap.State != health.Eligible || len(snap.Targets) != 0 {
						t.Errorf("state %v targets %+v, want eligible and not cooling for the host", snap.State, snap.Targets)
					}
					return
				}
				if resp.StatusCode != http.StatusBadGateway || !strings.HasPrefix(resp.Header.Get("X-Rotor-Error"), "auth_rejected; stage=proxy_auth") {
					t.Fatalf("got %s X-Rotor-Error %q, want 502 auth_rejected", resp.Status, resp.Header.Get("X-Rotor-Error"))
				}
				if snap.State != health.Eligible || len(snap.Targets) != 1 || snap.Targets[0].Host != "example.test" || snap.Targets[0].Reason != health.AuthRejected {
					t.Errorf("state %v targets %+v, want eligible, auth_rejected for example.test only", snap.State, snap.Targets)
				}
				maybe := strings.Contains(body, "or relayed the target's own 407")
				if maybe != tc.unmarked {
					t.Errorf("reason %q: says it may be the target's 407: %v, want %v", body, maybe, tc.unmarked)
				}
				if !tc.unmarked && !strings.Contains(body, "the proxy rejected rotor's credentials for it)") {
					t.Errorf("reason %q, want the proxy's rejection of rotor's credentials", body)
				}
				h := snap.History[len(snap.History)-1]
				if got := strings.Contains(h.Detail, "it may be the target's 407"); got != tc.unmarked {
					t.Errorf("history detail %q: says it may be the target's: %v, want %v", h.Detail, got, tc.unmarked)
				}
			})
		}
	}
}

// TestClassifyProxyResponse407 pins own407's reading of each shape, on
// the answer's head alone.
func TestClassifyProxyResponse407(t *testing.T) {
	srv, _ := startGateway(t, "[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"http://rotor:up-pw@127.0.0.1:1\"\nname = \"tp\"\n")
	e := srv.Pool().Lookup("tp")
	for _, tc := range []struct {
		name, answer string
		want         *health.Class // nil: the target's answer
		unmarked     bool
	}{
		{"squid's own 407", squidOwn407, ptr(health.AuthRejected), false},
		{"tinyproxy's own 407", tinyOwn407, ptr(health.AuthRejected), false},
		{"tinyproxy's own 401", tinyOwn401, ptr(health.AuthRejected), false},
		{"squid relayed 407", squidRelayed407, nil, false},
		{"tinyproxy relayed 407", tinyRelayed407, nil, false},
		{"tinyproxy relayed 401", tinyRelayed401, nil, false},
		{"a 407 relayed by tinyproxy with a forged X-Squid-Error", strings.Replace(tinyRelayed407, "Via:", "X-Squid-Error: ERR_CACHE_ACCESS_DENIED 0\r\nVia:", 1), nil, false},
		{"unmarked 407", unmarked407, ptr(health.AuthRejected), true},
		{"unmarked 407 with an unknown Via", strings.Replace(unmarked407, "Content-Length", "Via: 1.1 varnish\r\nContent-Length", 1), ptr(health.AuthRejected), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(tc.answer)), &http.Request{Method: http.MethodGet})
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			f := classifyProxyResponse(e, resp)
			switch {
			case tc.want == nil && f != nil:
				t.Fatalf("got %v, want the target's answer (nil)", f)
			case tc.want == nil:
				return
			case f == nil || f.Class != *tc.want || f.Stage != health.StageProxyAuth || f.Scope != health.ScopeTarget:
				t.Fatalf("got %+v, want %v at proxy_auth for the host", f, *tc.want)
			}
			if got := errors.As(f, new(*unmarked407Error)); got != tc.unmarked {
				t.Errorf("unmarked: %v, want %v (%v)", got, tc.unmarked, f)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
