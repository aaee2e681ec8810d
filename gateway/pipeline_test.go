package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPipelineConfig: pipeline = true reaches the spec of socks5 upstreams
// (one by one, or every line of a socks5 list file) and is a FILE:LINE
// error anywhere else.
func TestPipelineConfig(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "socks.txt"), []byte("127.0.0.7:1080:u:p\nhttp://127.0.0.8:3128\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "rotor.toml")
	cfg, err := ParseConfig(path, []byte(`
[[upstream]]
url = "socks5://127.0.0.1:1080"
pipeline = true

[[upstream]]
url = "socks5://127.0.0.2:1080"

[[upstream_file]]
path = "socks.txt"
scheme = "socks5"
pipeline = true
`))
	if err != nil {
		t.Fatal(err)
	}
	specs, _, problems, err := cfg.specs()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range specs {
		got[s.URL.Host] = s.Pipeline
	}
	if !got["127.0.0.1:1080"] || got["127.0.0.2:1080"] || !got["127.0.0.7:1080"] || len(specs) != 3 {
		t.Errorf("pipeline by upstream: %v (%d specs)", got, len(specs))
	}
	if len(problems) != 1 || problems[0].Line != 2 || !strings.Contains(problems[0].Msg, "pipeline = true applies to socks5 upstreams only") {
		t.Errorf("the http line of a pipelined list: %v", problems)
	}

	// At the pipeline key's line, like every other key's error.
	for _, tc := range []struct{ text, want string }{
		{"[[upstream]]\nurl = \"http://127.0.0.1:3128\"\npipeline = true\n", "bad.toml:3: upstream http://127.0.0.1:3128: pipeline = true applies to socks5 upstreams only"},
		{"[[upstream_file]]\npath = \"x.txt\"\npipeline = true\n", "bad.toml:3: upstream_file: pipeline = true needs scheme = \"socks5\""},
	} {
		if _, err := ParseConfig("bad.toml", []byte(tc.text)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %s", tc.text, err, tc.want)
		}
	}
}
