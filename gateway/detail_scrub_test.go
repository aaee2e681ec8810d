package gateway

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// Secrets of the scrub tests: short ones on purpose (4 to 6 bytes), which
// the final pass does not hide wherever they stand.
const (
	scrubPwA    = "pass"   // upstream up-a's password
	scrubPwB    = "Zq9w"   // upstream up-b's password
	scrubClient = "cl1pw"  // [[client]] carol's password
	scrubAdmin  = "adm1nT" // the admin token
)

// TestOwnWordsNotMasked: with an upstream user:pass, a passed probe read
// "probe xxxxxed" in the API and the state file: the final pass hid every
// secret of 3 bytes or more wherever it stood, rotor's own words
// included, which tells the password to whoever reads them. Now the final
// pass hides only secrets of 8 bytes or more, as whole words (peer text,
// where a short one may stand, is scrubbed where it enters rotor), and
// rotor's words stay as they are.
func TestOwnWordsNotMasked(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Username: "user", Password: "pass"})
	state := filepath.Join(t.TempDir(), "state.json")
	srv, _ := startGateway(t, fmt.Sprintf("state_file = %q\nallow_private_destinations = true\n%s\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		state, probeConf(target), up.URL().String()))
	waitState(t, srv, "up", health.Eligible)
	_, _, rec := doRequest(t, "http://"+srv.Addr("admin"), "GET", "/api/upstreams/up", "")
	if err := srv.saveState(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	for where, out := range map[string]string{"record": rec, "state file": string(file)} {
		if !strings.Contains(out, `"probe passed"`) || strings.Contains(out, "xxxxxed") {
			t.Errorf("%s does not say \"probe passed\":\n%s", where, out)
		}
	}
}

// TestFinalPassWholeWords pins the final pass (detailScrubber): a short
// password is left alone wherever it stands (it is hidden where peer text
// enters), a long one is hidden where it stands as a word, and never
// inside another word.
func TestFinalPassWholeWords(t *testing.T) {
	short := detailScrubber(url.UserPassword("user", "pass"))
	long := detailScrubber(url.UserPassword("user", "longpass1"))
	tests := []struct {
		name  string
		scrub func(string) string
		in    string
		want  string
	}{
		{"rotor's words, short password", short, "probe passed", "probe passed"},
		{"rotor's words cut, short password", short, "probe pass…", "probe pass…"},
		{"a long password as a word", long, "said longpass1 here", "said xxxxx here"},
		{"a long password after a colon", long, "user:longpass1", "user:xxxxx"},
		{"a long password inside a word stays", long, "xlongpass1y", "xlongpass1y"},
		// A password that is a word of letters is one rotor writes itself:
		// hiding it told it (issue: "username/xxxxx rejected", "enabled
		// by xxxxx", "restart re-check: xxxxx before the restart").
		{"password \"password\": rotor's words", detailScrubber(url.UserPassword("sy", "password")),
			"proxy_auth: auth_rejected: socks5: username/password rejected (status 2)", "proxy_auth: auth_rejected: socks5: username/password rejected (status 2)"},
		{"password \"operator\": rotor's words", detailScrubber(url.UserPassword("sz", "operator")), "enabled by operator", "enabled by operator"},
		{"password \"eligible\": rotor's words cut", detailScrubber(url.UserPassword("sq", "eligible")), "restart re-check: eligi…", "restart re-check: eligi…"},
		{"a word password's Basic token is hidden", detailScrubber(url.UserPassword("sy", "password")),
			"echo Basic " + base64.StdEncoding.EncodeToString([]byte("sy:password")), "echo Basic xxxxx"},
		{"a long password cut at the end", long, "said longpa…", "said xxxxx…"},
		{"a cut start inside a word stays", long, "said xlongpa…", "said xlongpa…"},
		{"url userinfo, short password", short, "dial http://user:pass@h:1: refused", "dial http://user:xxxxx@h:1: refused"},
		{"basic token, short password", short, "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("user:pass")),
			"Proxy-Authorization: Basic xxxxx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.scrub(tt.in); got != tt.want {
				t.Errorf("scrub(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// TestPeerTextScrubbedAtEntry: what an upstream answers (a CONNECT
// status line, its own answer to a forwarded request, a target's status
// it relays) went into the record's detail, the log, the API and the
// client's 502 with only its own password hidden, and that one only from
// 3 bytes on; a short password of another upstream, a client's password
// and the Basic token of the client's Proxy-Authorization, echoed in a
// 502, stayed as they were (a proxy that saw them elsewhere, or a broken
// one, echoes whatever it was sent). Now peer text is scrubbed where it
// enters rotor against every secret rotor holds, whatever its length.
func TestPeerTextScrubbedAtEntry(t *testing.T) {
	const ownPw = "p4Ss"
	ownToken := base64.StdEncoding.EncodeToString([]byte("user:" + ownPw))
	carolToken := base64.StdEncoding.EncodeToString([]byte("carol:" + scrubClient))
	secrets := []string{ownPw, ownToken, scrubPwB, scrubClient, scrubAdmin, carolToken}
	echo := " user:" + ownPw + " " + ownToken + " bob:" + scrubPwB + " carol:" + scrubClient +
		" Proxy-Authorization: Basic " + carolToken + " tok " + scrubAdmin
	for _, tt := range []struct {
		name   string
		tunnel bool
		status string
		want   string // in the record
	}{
		{"CONNECT answer", true, "502 Bad Gateway", "upstream_error"},
		{"CONNECT 407", true, "407 Denied", "auth_rejected"},
		{"own answer to a forwarded request", false, "407 Denied", "auth_rejected"},
		{"a target's status relayed", false, "403 Forbidden", "target_http_error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := echoProxy(t, func([]string) string { return tt.status + echo })
			state := filepath.Join(t.TempDir(), "state.json")
			srv, logs := startGateway(t, fmt.Sprintf(`state_file = %q
[listen]
socks5 = "127.0.0.1:0"
http   = "127.0.0.1:0"
admin  = "127.0.0.1:0"
admin_token = %q
[pool]
start_eligible = true
max_attempts = 1
wait_for_upstream = "100ms"
[[client]]
username = "carol"
password = %q
[[upstream]]
url = "http://user:%s@%s"
name = "up"
[[upstream]]
url = "socks5://bob:%s@127.0.0.1:2"
name = "other"
disabled = true
`, state, scrubAdmin, scrubClient, ownPw, addr, scrubPwB))
			resp, err := httpGet(t, srv.Addr("http"), "carol", scrubClient, "http://127.0.0.1:9/x", tt.tunnel)
			if err != nil {
				t.Fatal(err)
			}
			client := fmt.Sprint(resp.Header) + bodyOf(resp)
			auth := []string{"Authorization", "Bearer " + scrubAdmin}
			_, _, rec := doRequest(t, "http://"+srv.Addr("admin"), "GET", "/api/upstreams/up", "", auth...)
			if !strings.Contains(rec, tt.want) || !strings.Contains(rec, "xxxxx") {
				t.Fatalf("the record has no %s with a hidden secret:\n%s", tt.want, rec)
			}
			if err := srv.saveState(); err != nil {
				t.Fatal(err)
			}
			file, err := os.ReadFile(state)
			if err != nil {
				t.Fatal(err)
			}
			for where, out := range map[string]string{"client": client, "record": rec, "log": logs.String(), "state file": string(file)} {
				for _, sec := range secrets {
					if strings.Contains(out, sec) {
						t.Errorf("%s shows %q:\n%s", where, sec, out)
					}
				}
			}
		})
	}
}

// TestInvalidAnswerScrubbed: a target's answer that does not parse is
// quoted in the client's 502, the log and the record's history; the
// secrets it echoed were hidden only when they were credential headers
// or tokens, for the lean client (GET) and the Transport (POST) alike.
// Now the quote is scrubbed against every secret rotor holds.
func TestInvalidAnswerScrubbed(t *testing.T) {
	for _, method := range forwardMethods {
		t.Run(method, func(t *testing.T) {
			rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
				if _, err := rt.readHead(br); err != nil {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nEcho bob="+scrubPwB+" tok "+scrubAdmin+"\r\n\r\n")
				_, _ = io.Copy(io.Discard, br) // until rotor closes
			})
			srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
				"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n"+
				"[[upstream]]\nurl = \"socks5://bob:"+scrubPwB+"@127.0.0.1:2\"\nname = \"other\"\ndisabled = true\n")
			resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "bob=xxxxx") {
				t.Fatalf("got %d %q, want a 502 quoting the answer, its secret hidden", resp.StatusCode, body)
			}
			for where, out := range map[string]string{"client": body, "log": logs.String()} {
				if strings.Contains(out, scrubPwB) {
					t.Errorf("%s shows %q:\n%s", where, scrubPwB, out)
				}
			}
		})
	}
}
