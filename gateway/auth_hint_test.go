package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestAuthRefusalSaysWhatDidNotParse: a username rotor cannot split into
// a user and parameters gets a 407 saying what is wrong with the
// parameters when the password is right for the user they follow, and the
// bare 407 (or the hint every client gets, whoever the user) otherwise:
// nothing tells a client that a user exists unless its own password does.
// Issue: scraper-sesion-a1 with scraper's password got a bare "proxy
// authentication required".
func TestAuthRefusalSaysWhatDidNotParse(t *testing.T) {
	a := newAuthenticator([]ClientConfig{{Username: "scraper", Password: "pw-1"}, {Username: "bob-eu", Password: "pw-2"}})
	const bare = "proxy authentication required"
	notUnderstood := bare + " (username parameters not understood: " + paramsSyntax + ")"
	wrong := bare + ": the username or password is incorrect"
	none := bare + ": no username was sent; send the username and password rotor's operator gave you (Proxy-Authorization: Basic)"
	right := func(user, rest, problem string) string {
		return bare + ` (the password is right for user "` + user + `", but rotor cannot read "` + rest +
			`" after it as parameters: ` + problem + "; want " + paramsSyntax + ")"
	}
	tests := []struct {
		user, pass, want string
	}{
		{"scraper-sesion-a1", "pw-1", right("scraper", "-sesion-a1", `"sesion" is not a parameter (session or tag)`)},
		{"scraper-session-", "pw-1", right("scraper", "-session-", "session-<id> is missing its value")},
		{"scraper-session-a1-tag-", "pw-1", right("scraper", "-session-a1-tag-", "tag-<tag> is missing its value")},
		{"scraper-session-a1-session-b2", "pw-1", right("scraper", "-session-a1-session-b2", `session is given twice ("a1" and "b2")`)},
		{"scraper-session-1b2c-3d4e", "pw-1", right("scraper", "-session-1b2c-3d4e", `"3d4e" after session-1b2c is not a parameter (an id or a tag cannot contain '-')`)},
		{"scraper-x-tag-us", "pw-1", right("scraper", "-x", `"x" is not a parameter (session or tag)`)},
		{"bob-eu-sesion-a1", "pw-2", right("bob-eu", "-sesion-a1", `"sesion" is not a parameter (session or tag)`)},
		// A password that is not the user's, or no such user: the same
		// answers as for any name.
		{"scraper-sesion-a1", "wrong", wrong},
		{"nobody-sesion-a1", "pw-1", wrong},
		{"bob-eu-sesion-a1", "pw-1", wrong},
		{"scraper-session-", "wrong", notUnderstood},
		{"nobody-session-", "pw-1", notUnderstood},
		{"scraper", "wrong", wrong},
		{"scraper-session-a1", "wrong", wrong},
		{"", "", none},
	}
	for _, tc := range tests {
		got := a.refusal(tc.user, tc.pass, parseUser(tc.user))
		if got != tc.want {
			t.Errorf("%q / %q:\n got %q\nwant %q", tc.user, tc.pass, got, tc.want)
		}
		if strings.Contains(got, tc.pass) && tc.pass != "" {
			t.Errorf("%q: the password is in the answer: %q", tc.user, got)
		}
	}
}

// TestParseUserRefusesTwoSessions: a second session id is not guessed at
// (the last one won, silently): the name is taken whole as the user name,
// as any whose parameters do not parse.
func TestParseUserRefusesTwoSessions(t *testing.T) {
	for raw, want := range map[string]userParams{
		"scraper-session-a1-session-b2":        {User: "scraper-session-a1-session-b2"},
		"scraper-session-a1-tag-us-session-a1": {User: "scraper-session-a1-tag-us-session-a1"},
		"scraper-session-a1-tag-us-tag-de":     {User: "scraper", Session: "a1", Tags: []string{"us", "de"}},
	} {
		got := parseUser(raw)
		if got.User != want.User || got.Session != want.Session || strings.Join(got.Tags, ",") != strings.Join(want.Tags, ",") {
			t.Errorf("parseUser(%q) = %+v, want %+v", raw, got, want)
		}
	}
}

// TestHTTPFront407NamesBadParameters: the hints reach the client, on both
// kinds of request of the HTTP front; the SOCKS5 front refuses the same
// names (RFC 1929 has no room for a reason).
func TestHTTPFront407NamesBadParameters(t *testing.T) {
	srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[[client]]\nusername = \"scraper\"\npassword = \"pw-Canary7\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n")
	for _, tc := range []struct {
		user, want string
	}{
		{"scraper-sesion-a1", `"sesion" is not a parameter`},
		{"scraper-session-a1-session-b2", `session is given twice ("a1" and "b2")`},
	} {
		for _, tunnel := range []bool{false, true} {
			resp, err := httpGet(t, srv.Addr("http"), tc.user, "pw-Canary7", "http://127.0.0.1:1/", tunnel)
			if err != nil {
				t.Fatal(err)
			}
			body := bodyOf(resp)
			if resp.StatusCode != http.StatusProxyAuthRequired || !strings.Contains(body, tc.want) || !strings.Contains(body, `user "scraper"`) {
				t.Errorf("%q (tunnel %v): %d %q, want 407 saying %s", tc.user, tunnel, resp.StatusCode, body, tc.want)
			}
		}
		if _, err := socksGet(t, srv.Addr("socks5"), tc.user, "pw-Canary7", "http://127.0.0.1:1/"); err == nil {
			t.Errorf("%q: the SOCKS5 front accepted it", tc.user)
		}
	}
	if strings.Contains(logs.String(), "pw-Canary7") {
		t.Error("the client password reached the log")
	}
}
