package gateway

import (
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream"
)

// TestListTypoSameAsConfig: a list file's line and the config's url say
// the same of a scheme missing its "//" or its ':' (one code,
// upstream.SchemeTypo).
func TestListTypoSameAsConfig(t *testing.T) {
	for _, raw := range []string{"http//h:1", "socks5:/x", "http:/h:1", "socks5:127.0.0.1:1080", "https//u:S3cretPw@h:1"} {
		_, errs := upstream.ParseList(strings.NewReader(raw+"\n"), "http")
		_, cerr := ParseConfig("u.toml", []byte("[[upstream]]\nurl = "+tomlString(raw)+"\n"))
		if len(errs) != 1 || cerr == nil {
			t.Fatalf("%s: list %v, config %v: want an error from each", raw, errs, cerr)
		}
		if list := errs[0].Err.Error(); !strings.HasSuffix(cerr.Error(), list) {
			t.Errorf("%s:\nlist   %s\nconfig %s", raw, list, cerr)
		}
	}
}
