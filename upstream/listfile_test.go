package upstream

import (
	"errors"
	"strings"
	"testing"
)

func TestParseList(t *testing.T) {
	const pw = "s3cr:et@x"
	in := strings.Join([]string{
		"\ufeff# proxies from the seller", // 1 BOM + comment
		"",                                // 2
		"socks5://alice:" + "pw1" + "@10.0.0.1:1080", // 3
		"http://10.0.0.2:3128",                       // 4
		"10.0.0.3:8080",                              // 5
		"10.0.0.4:8080:bob:" + pw,                    // 6 password with ':' and '@'
		"carol:pw3@10.0.0.5:8080",                    // 7
		"  [::1]:1080  ",                             // 8
		"[2001:db8::1]:1080:dave:pw4",                // 9
		"erin:pw5@[2001:db8::2]:3128\r",              // 10 CRLF
		"https://frank:pw6@proxy.example:443/",       // 11
		"   # indented comment",                      // 12
		"socks5h://h.example:1080",                   // 13
		"10.0.0.6:8080:user:",                        // 14 empty password
		"socks5://10.0.0.7:1080:gina:pw7",            // 15 scheme + host:port:user:pass
		"SOCKS5://[2001:db8::3]:1080:hank:pw:8",      // 16 the same, IPv6, ':' in the password
		"ivan:pw:9:10.0.0.8:8080",                    // 17 user:pass:host:port, ':' in the password
		"judy:pw10:[2001:db8::4]:3128",               // 18 the same, IPv6
	}, "\n")
	want := []struct {
		line int
		url  string
	}{
		{3, "socks5://alice:pw1@10.0.0.1:1080"},
		{4, "http://10.0.0.2:3128"},
		{5, "http://10.0.0.3:8080"},
		{6, "http://bob:s3cr%3Aet%40x@10.0.0.4:8080"},
		{7, "http://carol:pw3@10.0.0.5:8080"},
		{8, "http://[::1]:1080"},
		{9, "http://dave:pw4@[2001:db8::1]:1080"},
		{10, "http://erin:pw5@[2001:db8::2]:3128"},
		{11, "https://frank:pw6@proxy.example:443"},
		{13, "socks5h://h.example:1080"},
		{14, "http://user:@10.0.0.6:8080"},
		{15, "socks5://gina:pw7@10.0.0.7:1080"},
		{16, "socks5://hank:pw%3A8@[2001:db8::3]:1080"},
		{17, "http://ivan:pw%3A9@10.0.0.8:8080"},
		{18, "http://judy:pw10@[2001:db8::4]:3128"},
	}
	got, errs := ParseList(strings.NewReader(in), "http")
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d entries, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Line != w.line || got[i].URL.String() != w.url {
			t.Errorf("entry %d = line %d %s, want line %d %s", i, got[i].Line, got[i].URL, w.line, w.url)
		}
	}
	if p, _ := got[3].URL.User.Password(); p != pw {
		t.Errorf("password = %q, want %q", p, pw)
	}
}

func TestParseListErrors(t *testing.T) {
	const pw = "Canary-Secret-99"
	tests := []struct {
		line string
		want string // substring of the error
	}{
		{"10.0.0.1", "missing port"},
		{"10.0.0.1:", "invalid port"},
		{"10.0.0.1:abc", "invalid port"},
		{"user:" + pw + ":1080", "invalid port"},     // user:pass:port, no host: the password is not echoed
		{"10.0.0.1:" + pw, "invalid port"},           // host:pass
		{"user:" + pw + ":10.0.0.1", "invalid port"}, // no port
		{"user:" + pw + ":10.0.0.1:bad", "invalid port"},
		{"10.0.0.1:70000", "invalid port"},
		{"10.0.0.1:0", "invalid port"},
		{"10.0.0.1:8080:useronly", "only a user"},
		{"user@10.0.0.1:8080", "must be user:pass"},
		{":" + pw + "@10.0.0.1:8080", "empty username"},
		{"10.0.0.1:8080::" + pw, "empty username"},
		{"u:" + pw + "@10.0.0.1", "want host:port"},
		{"u:" + pw + "@:8080", "empty host"},
		{"ftp://u:" + pw + "@10.0.0.1:21", "unsupported scheme"},
		{"direct://", "unsupported scheme"},
		{"http://u:" + pw + "@10.0.0.1:bad", "invalid URL"},
		{"http://u:" + pw + "@10.0.0.1:8080/path", "unexpected path"},
		{"http://u:" + pw + "@10.0.0.1:8080?q=1", "unexpected path"},
		{"http://u:" + pw + "@10.0.0.1", "want host:port"},
		{"http://u:" + pw + "%zz@10.0.0.1:80", "invalid URL"},
		{"socks5://bob6:x#" + pw + "@127.0.0.1:20162", "percent-encode them in the password"},
		{"http://bob6:x/" + pw + "@127.0.0.1:20162", "percent-encode them in the password"},
		{"[::1:1080", "missing ']'"},
		{"[::1]1080", "missing port"},
		{"u:" + pw + "@bad host:80", "invalid host"},
		{"socks5://10.0.0.1:1080:useronly", "only a user"},
		{"ftp://10.0.0.1:21:u:" + pw, "invalid URL"}, // not a list scheme: read as a URL, port not echoed
		{"http://10.0.0.1:80x:u:" + pw, "invalid URL"},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			in := "# header\n10.9.9.9:1\n" + tt.line + "\n10.9.9.9:2\n"
			got, errs := ParseList(strings.NewReader(in), "socks5")
			if len(got) != 2 || got[0].Line != 2 || got[1].Line != 4 {
				t.Fatalf("good lines not kept: %v", got)
			}
			if len(errs) != 1 || errs[0].Line != 3 {
				t.Fatalf("errs = %v, want one on line 3", errs)
			}
			msg := errs[0].Error()
			if !strings.Contains(msg, tt.want) || !strings.HasPrefix(msg, "line 3: ") {
				t.Fatalf("error %q, want containing %q", msg, tt.want)
			}
			if strings.Contains(msg, pw) {
				t.Fatalf("error leaks the password: %q", msg)
			}
		})
	}
}

func TestParseListLongLineAndDefaultScheme(t *testing.T) {
	in := "10.0.0.1:1\n" + strings.Repeat("x", 10000) + "\n10.0.0.2:2"
	got, errs := ParseList(strings.NewReader(in), "socks5")
	if len(got) != 2 || got[1].Line != 3 || got[1].URL.String() != "socks5://10.0.0.2:2" {
		t.Fatalf("got %v", got)
	}
	if len(errs) != 1 || errs[0].Line != 2 || !strings.Contains(errs[0].Error(), "longer than") {
		t.Fatalf("errs = %v", errs)
	}
	if _, errs := ParseList(strings.NewReader("10.0.0.1:1"), "direct"); len(errs) != 1 || errs[0].Line != 0 {
		t.Fatalf("bad default scheme: %v", errs)
	}
	if got, errs := ParseList(strings.NewReader(""), "http"); len(got) != 0 || len(errs) != 0 {
		t.Fatalf("empty: %v %v", got, errs)
	}
}

type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		r.n++
		return copy(p, "10.0.0.1:1\n"), nil
	}
	return 0, errors.New("disk on fire")
}

func TestParseListReadError(t *testing.T) {
	got, errs := ParseList(&failingReader{}, "http")
	if len(got) != 1 || len(errs) != 1 || errs[0].Line != 2 || !strings.Contains(errs[0].Error(), "disk on fire") {
		t.Fatalf("got %v, errs %v", got, errs)
	}
	var le LineError = errs[0]
	if errors.Unwrap(le) == nil {
		t.Fatal("LineError does not unwrap")
	}
}

// TestParseListTrailingComments: a '#' after white space starts a comment
// to the end of the line, in every format (bug: "127.0.0.1:23187   # dc-1"
// was refused as invalid port "23187   # dc-1"). A '#' right after other
// text is part of the line: passwords hold it.
func TestParseListTrailingComments(t *testing.T) {
	tests := []struct {
		line string
		want string // the URL; "" = the line is skipped as a comment
	}{
		{"127.0.0.1:23187   # trailing comment", "http://127.0.0.1:23187"},
		{"127.0.0.1:23187\t# tab before it", "http://127.0.0.1:23187"},
		{"127.0.0.1:23187 #", "http://127.0.0.1:23187"},
		{"socks5://u:pw@127.0.0.1:1080 # dc-1 # second", "socks5://u:pw@127.0.0.1:1080"},
		{"10.0.0.1:8080:bob:Pa#ss  # bob's", "http://bob:Pa%23ss@10.0.0.1:8080"},
		{"10.0.0.1:8080:bob:Pa#ss", "http://bob:Pa%23ss@10.0.0.1:8080"},
		{"carol:Pw#3@10.0.0.5:8080 # c", "http://carol:Pw%233@10.0.0.5:8080"},
		{"[::1]:1080 # v6", "http://[::1]:1080"},
		{"http://u:Pa%20%23ss@10.0.0.2:3128 # space and # in a password, encoded", "http://u:Pa%20%23ss@10.0.0.2:3128"},
		{"   # indented comment", ""},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			got, errs := ParseList(strings.NewReader(tt.line+"\n"), "http")
			if len(errs) != 0 {
				t.Fatalf("errors: %v", errs)
			}
			switch {
			case tt.want == "" && len(got) != 0:
				t.Fatalf("got %v, want nothing", got)
			case tt.want == "":
			case len(got) != 1 || got[0].URL.String() != tt.want:
				t.Fatalf("got %v, want %s", got, tt.want)
			}
		})
	}
}
