package gateway

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/upstream"
)

// TestConfigDuplicatesNameTheFirst: each duplicate [[upstream]] (by url
// and by name) names the first entry; a third copy said it duplicated the
// second (":6 duplicates the one at line 4").
func TestConfigDuplicatesNameTheFirst(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"rotor.toml": strings.Join([]string{
		"[[upstream]]",
		"url = \"http://127.0.0.1:7\"", // 2
		"name = \"a\"",                 // 3
		"[[upstream]]",
		"url = \"http://127.0.0.1:7\"", // 5
		"name = \"a\"",                 // 6
		"[[upstream]]",
		"url = \"http://127.0.0.1:7\"", // 8
		"name = \"a\"",                 // 9
	}, "\n") + "\n"})
	path := filepath.Join(dir, "rotor.toml")
	want := strings.Join([]string{
		path + ":5: upstream http://127.0.0.1:7 duplicates the one at line 2",
		path + ":6: upstream name \"a\" duplicates the one at line 3",
		path + ":8: upstream http://127.0.0.1:7 duplicates the one at line 2",
		path + ":9: upstream name \"a\" duplicates the one at line 3",
	}, "\n")
	if err := CheckConfig(path); err == nil || err.Error() != want {
		t.Errorf("CheckConfig:\n%v\nwant\n%s", err, want)
	}
	if _, err := LoadConfig(path); err == nil || err.Error() != want {
		t.Errorf("LoadConfig:\n%v\nwant\n%s", err, want)
	}
}

// TestNameDefaultsLinear: n unnamed upstreams sharing a default name get
// direct, direct~2 … direct~n with work linear in n. Each name searched
// for its ~N suffix from ~2 again, n²/2 formatted tries: -check of 20,000
// copies of url = "direct://" took 32 s, 100,000 did not end. Counted in
// allocations (one formatted try is at least one), not timed.
func TestNameDefaultsLinear(t *testing.T) {
	const n = 2000
	direct, err := url.Parse("direct://")
	if err != nil {
		t.Fatal(err)
	}
	specs := make([]upstream.Spec, n)
	for i := range specs {
		specs[i].URL = direct
	}
	var named []upstream.Spec
	allocs := testing.AllocsPerRun(1, func() {
		named = append([]upstream.Spec(nil), specs...)
		nameDefaults(named)
	})
	// About two per name (the suffix and the name); the quadratic search
	// made about n²/2 = 2,000,000.
	if limit := 20.0 * n; allocs > limit {
		t.Errorf("naming %d copies of direct:// made %.0f allocations, want at most %.0f (linear)", n, allocs, limit)
	}
	for i, want := range map[int]string{0: "direct", 1: "direct~2", n - 1: "direct~2000"} {
		if got := named[i].Name; got != want {
			t.Errorf("name %d = %q, want %q", i, got, want)
		}
	}
	// A suffix a name takes already is skipped, as before.
	few := []upstream.Spec{{URL: direct, Name: "direct~3"}, {URL: direct}, {URL: direct}, {URL: direct}}
	nameDefaults(few)
	for i, want := range []string{"direct~3", "direct", "direct~2", "direct~4"} {
		if got := few[i].Name; got != want {
			t.Errorf("with a name direct~3: name %d = %q, want %q", i, got, want)
		}
	}
}

// nestedHead is four lines before the nesting in the files of
// TestConfigNestingRefused: the deep part is at line 5.
const nestedHead = "[[upstream]]\nurl = \"direct://\"\n# a comment\n[pool]\n"

// nestingMsg is the error of a file nested past maxNesting.
var nestingMsg = fmt.Sprintf("nested more than %d levels deep (each table header or dotted key part, array and [[table]] is one); rotor's keys are at most 4 deep", maxNesting)

// TestConfigNestingRefused: a small file nested thousands of levels deep
// (x = {a={a=…}}, a header [a.a.a…], a dotted key, arrays) is refused
// before it is decoded, at the line where it goes past maxNesting, in one
// short line. The decoder took seconds and gigabytes on these (4,000
// inline tables in 16 KB: 4.2 s, 968 MB; a 20,000-part header in 40 KB:
// 13.8 s, 1.2 GB and a 40 KB error line); only the error is asserted,
// not how long it took. Brackets in strings and comments are text, and
// nesting up to the bound is left to the decoder.
func TestConfigNestingRefused(t *testing.T) {
	deep := func(open, leaf, close string, n int) string {
		return strings.Repeat(open, n) + leaf + strings.Repeat(close, n)
	}
	for _, tc := range []struct{ name, text string }{
		{"inline tables", "x = " + deep("{a=", "1", "}", 4000) + "\n"},
		{"inline tables over lines", "x = " + deep("{\n a =", "1", "\n}", 4000) + "\n"},
		{"table header", "[" + strings.Repeat("a.", 20000) + "a]\nb = 1\n"},
		{"array of tables header", "[[" + strings.Repeat("a.", 20000) + "a]]\n"},
		{"dotted key", strings.Repeat("a.", 20000) + "a = 1\n"},
		{"quoted dotted key", strings.Repeat(`"a".`, 20000) + "'a' = 1\n"},
		{"arrays", "x = " + deep("[", "1", "]", 20000) + "\n"},
		{"arrays of inline tables", "x = " + deep("[{a = ", "1", "}]", 4000) + "\n"},
		{"just past the bound", "x = " + deep("{a=", "1", "}", maxNesting-1) + "\n"},
		{"nested [[table]] headers", func() string {
			var b strings.Builder
			for i := 1; i <= maxNesting; i++ {
				b.WriteString("[[" + strings.Repeat("a.", i-1) + "a]]\n")
			}
			return b.String()
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("t.toml", []byte(nestedHead+tc.text))
			var ces ConfigErrors
			if !asConfigErrors(err, &ces) || len(ces) != 1 || ces[0].Line < 5 || ces[0].Msg != nestingMsg {
				t.Fatalf("got %.300q\nwant one error at line 5 or after: %s", fmt.Sprint(err), nestingMsg)
			}
			// [[a.a]] is a, its element, a, its element: 4 levels, so
			// the 17th header is 34 deep.
			if want := 5 + maxNesting/2; tc.name == "nested [[table]] headers" && ces[0].Line != want {
				t.Errorf("at line %d, want %d", ces[0].Line, want)
			}
			if tc.name != "nested [[table]] headers" && tc.name != "inline tables over lines" && ces[0].Line != 5 {
				t.Errorf("at line %d, want 5", ces[0].Line)
			}
		})
	}
	for _, tc := range []struct{ name, text string }{
		{"at the bound", "x = " + deep("{a=", "1", "}", maxNesting-2) + "\n"},
		{"brackets in strings", "x = \"" + strings.Repeat("{[", 5000) + "\"\ny = '" + strings.Repeat("{[", 5000) + "'\n"},
		{"brackets in multi-line strings", "x = \"\"\"\n" + strings.Repeat("{[\\\"\n", 5000) + "\"\"\"\"\ny = '''" + strings.Repeat("[{\n", 5000) + "'''\n"},
		{"brackets in comments", "# " + strings.Repeat("{[", 5000) + "\nx = [ # " + strings.Repeat("[", 5000) + "\n 1, # " + strings.Repeat("{", 5000) + "\n]\n"},
		{"many shallow tables", strings.Repeat("[[t]]\na.b = {c = [1, {d = 2}]}\n", 2000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("t.toml", []byte(nestedHead+tc.text))
			if err == nil {
				t.Fatal("no error; the test's keys are unknown ones")
			}
			if strings.Contains(err.Error(), "levels deep") {
				t.Errorf("refused for nesting: %.300s", err)
			}
		})
	}
	// The files rotor ships nest at most 4 deep.
	for _, path := range []string{"../config.example.toml", "../docker/rotor.toml"} {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		n := nestScan{s: string(data), deep: -1}
		if n.file(); n.i != len(n.s) || n.deep >= 0 || n.max > 4 {
			t.Errorf("%s: scanned to byte %d of %d, %d levels deep at most; want the whole file, at most 4", path, n.i, len(n.s), n.max)
		}
	}
}

// asConfigErrors is errors.As for ConfigErrors.
func asConfigErrors(err error, ces *ConfigErrors) bool {
	e, ok := err.(ConfigErrors)
	*ces = e
	return ok
}

// TestReloadNestedRefused: a reload of a file nested too deep is refused
// with FILE:LINE and the running config stays (-check and a start read
// the file through the same ParseConfig).
func TestReloadNestedRefused(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.toml")
	good := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[[upstream]]\nurl = \"direct://\"\nname = \"kept\"\n"
	writeFiles(t, dir, map[string]string{"rotor.toml": good})
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"rotor.toml": good + "x = " + strings.Repeat("{a=", 4000) + "1" + strings.Repeat("}", 4000) + "\n"})
	want := path + ":8: " + nestingMsg
	if err := srv.ReloadFile(); err == nil || err.Error() != want {
		t.Errorf("reload: %.300v\nwant %s", err, want)
	}
	if err := CheckConfig(path); err == nil || err.Error() != want {
		t.Errorf("CheckConfig: %.300v\nwant %s", err, want)
	}
	if srv.Config() != cfg || srv.Pool().Lookup("kept") == nil {
		t.Error("the refused reload replaced the running config")
	}
}

// TestConfigEchoesBounded: a key or value of a megabyte is echoed cut to
// maxShown bytes with "…" (an unknown 10 MB key was printed whole, by
// -check and in every reload's log line), and no message, whatever
// quotes it (the decoder's own), is longer than maxMsg. Cutting comes
// after redaction: no piece of a long password shows.
func TestConfigEchoesBounded(t *testing.T) {
	const big = 1 << 20
	long := func(c string) string { return strings.Repeat(c, big) }
	cut := func(c string) string { return strings.Repeat(c, maxShown) + "…" }
	password := "Zq8" + strings.Repeat("Pw7", big/3)
	up := "[[upstream]]\nurl = \"direct://\"\n"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"unknown key", up + long("k") + " = 1\n", `unknown key "upstream.` + strings.Repeat("k", maxShown-len("upstream.")) + `…"`},
		{"unknown table", up + "[" + long("t") + "]\nx = 1\n", `unknown key "` + cut("t") + `"`},
		{"client username", up + "[[client]]\nusername = \"" + long("u") + "-tag-x\"\npassword = \"pw-ok\"\n", `client "` + cut("u") + `"`},
		{"tag", "[[upstream]]\nurl = \"direct://\"\ntags = [\"" + long("g") + "-\"]\n", `tag "` + cut("g") + `"`},
		{"scope", up + "[slow_body]\nscope = \"" + long("s") + "\"\n", `slow_body.scope: "` + cut("s") + `"`},
		{"duration", up + "[pool]\nconnect_timeout = \"" + long("9") + "x\"\n", `invalid duration "` + cut("9") + `"`},
		{"listen address", up + "[listen]\nsocks5 = \"" + long("h") + "\"\n", `listen.socks5: "` + cut("h") + `"`},
		{"upstream url", "[[upstream]]\nurl = \"socks5://" + long("n") + ":" + password + "@127.0.0.1:99999\"\n", `upstream "socks5://` + strings.Repeat("n", maxShown-len("socks5://")) + `…"`},
		{"upstream password alone", "[[upstream]]\nurl = \"socks5://user:" + password + "@127.0.0.1:99999\"\n", `upstream "socks5://user:xxxxx@127.0.0.1:99999"`},
		{"decoder's message", up + long("d") + " = 1\n" + long("d") + " = 2\n", "Key 'upstream." + strings.Repeat("d", maxShown-len("'upstream.")) + "… has already been defined."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("t.toml", []byte(tc.text))
			if err == nil {
				t.Fatal("no error")
			}
			var ces ConfigErrors
			if !asConfigErrors(err, &ces) {
				t.Fatalf("error %T, want ConfigErrors", err)
			}
			found := false
			for _, e := range ces {
				line := e.Error()
				if len(line) > len("t.toml:99: ")+maxMsg+len("…") {
					t.Errorf("a %d-byte error line: %.200s…", len(line), line)
				}
				for _, piece := range []string{"Zq8", "Pw7Pw7"} {
					if strings.Contains(line, piece) {
						t.Errorf("a piece of the password (%s) in: %.300s", piece, line)
					}
				}
				found = found || strings.Contains(line, tc.want)
			}
			if !found {
				t.Errorf("no error shows %.300q:\n%.2000s", tc.want, err)
			}
		})
	}
}
