package gateway

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scrubConfig has two upstreams, a client and an admin token, all with
// short secrets, and a state file in dir.
func scrubConfig(dir string) string {
	return fmt.Sprintf(`state_file = %q
[listen]
socks5 = "127.0.0.1:0"
http   = "127.0.0.1:0"
admin  = "127.0.0.1:0"
admin_token = %q

[pool]
start_eligible    = true
wait_for_upstream = "200ms"

[cooldown]
jitter = -1

[[client]]
username = "carol"
password = %q

[[upstream]]
url  = "http://user:%s@127.0.0.1:1"
name = "up-a"

[[upstream]]
url  = "socks5://bob:%s@127.0.0.1:2"
name = "up-b"
`, filepath.Join(dir, "state.json"), scrubAdmin, scrubClient, scrubPwA, scrubPwB)
}

// TestReportDetailScrubbed: a /report detail was stored as the client
// wrote it (serveReport), so a password in it showed in the "upstream
// state changed" log line and, when it was another upstream's, a
// client's or the admin token, in the history, the API and the state
// file too: the final pass knew this upstream's password only. Now the
// detail is scrubbed at entry against every secret rotor holds, whatever
// its length; so is an operator's disable reason.
func TestReportDetailScrubbed(t *testing.T) {
	carolToken := base64.StdEncoding.EncodeToString([]byte("carol:" + scrubClient))
	secrets := []string{scrubPwA, scrubPwB, scrubClient, scrubAdmin, carolToken}
	detail := "ban page quoting user:" + scrubPwA + " bob:" + scrubPwB + " carol:" + scrubClient +
		" token " + scrubAdmin + " header " + carolToken
	for _, tt := range []struct {
		name, action, body string
	}{
		{"report", "report", `{"class":"upstream_error","detail":"` + detail + `"}`},
		{"report for a target", "report", `{"class":"target_http_error","target":"shop.example","detail":"` + detail + `"}`},
		{"disable", "disable", `{"detail":"` + detail + `"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			f := newAdminFixture(t, scrubConfig(dir), fixedClock())
			auth := []string{"Authorization", "Bearer " + scrubAdmin}
			code, _, body := f.do(t, "POST", "/api/upstreams/up-a/"+tt.action, tt.body, auth...)
			if code != 200 {
				t.Fatalf("%s: %d %s", tt.action, code, body)
			}
			_, _, rec := f.do(t, "GET", "/api/upstreams/up-a", "", auth...)
			if !strings.Contains(rec, "ban page quoting user:xxxxx") {
				t.Errorf("the record lost the detail's words:\n%s", rec)
			}
			if err := f.srv.saveState(); err != nil {
				t.Fatal(err)
			}
			file, err := os.ReadFile(filepath.Join(dir, "state.json"))
			if err != nil {
				t.Fatal(err)
			}
			for where, out := range map[string]string{"answer": body, "record": rec, "log": f.logs.String(), "state file": string(file)} {
				for _, sec := range secrets {
					if strings.Contains(out, sec) {
						t.Errorf("%s shows %q:\n%s", where, sec, out)
					}
				}
			}
		})
	}
}
