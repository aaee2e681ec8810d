package gateway

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

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
