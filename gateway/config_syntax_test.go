package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// syntaxSecretKeys are the places a secret is written in a config, each
// as the lines before its key and the key as an error names it.
var syntaxSecretKeys = []struct {
	before, key, name string
}{
	{"[[client]]\nusername = \"scraper\"\n", "password", "client.password"},
	{"[listen]\n", "admin_token", "listen.admin_token"},
	{"[[upstream]]\nname = \"n\"\n", "url", "upstream.url"},
	{"[probe]\n", "url", "probe.url"},
	{"[cluster]\ninstance = \"a\"\n", "redis", "cluster.redis"},
	{"", "listen.admin_token", "listen.admin_token"},
	{"[[client]]\n", "passwd", "client.passwd"}, // misspelt: unknown, but it still looks like a password
}

// syntaxSecretShapes are values a syntax error stops in, %s the secret:
// quotes forgotten (with white space or text after it, starting like a
// number, a date or a boolean), quoted but broken (bad escapes, control
// bytes, not closed), or followed by more of it.
var syntaxSecretShapes = []struct {
	value    string
	unquoted bool // the error says the value must be quoted
}{
	{" = %s", true},
	{"= %s", true},
	{"=%s", true},
	{" = %s T", true},
	{" = %s # comment", true},
	{" = 12.3%s", true},
	{" = 123%s", true},
	{" = 0x%s", true},
	{" = 1_2_%s", true},
	{" = +%s", true},
	{" = -%s", true},
	{" = 2024-01-01T%s", true},
	{" = 1979-05-27T07:32:00%s", true},
	{" = true%s", true},
	{" = in%s", true},
	{" = http://u:%s@127.0.0.1:1", true},
	{" = ['%s' %s]", false},
	{` = "%s" %s`, false},
	{` = "%s\x4"`, false},
	{` = "%s\u12"`, false},
	{` = "\q%s"`, false},
	{" = \"%s\x01\"", false},
	{" = '%s\n", false},
	{" = \"%s\n", false},
	{` = """%s`, false},
	{" = '''%s'''%s", false},
	{" %s", false}, // the '=' forgotten
}

// TestConfigSyntaxErrorHidesSecret: a TOML syntax error in the value of
// a key that holds a secret printed the value: `password = SeCrEtUnq`
// (quotes forgotten) gave `rotor.toml:12: expected value but found
// "SeCrEtUnq" instead` in -check and in the log of a rejected reload,
// and so did admin_token, an upstream url and [cluster] redis. Parsing
// failed, so no secret was known to redact. The error now names the
// line and the key, says the value must be quoted when it is not, and
// shows nothing of the value.
func TestConfigSyntaxErrorHidesSecret(t *testing.T) {
	dir := t.TempDir()
	secrets := []string{"SeCrEtUnq", "Zq7Kw9Xp", "K7qa#Zx9w", "Hy6l Tr3m", "Pö8nÜs9o✓", "Xe1p:Vb2q:Cn3r", "Ij4t://Kl5u", "Ef2r!$'()*Gh3s"}
	for _, k := range syntaxSecretKeys {
		for _, sh := range syntaxSecretShapes {
			for _, pw := range secrets {
				value := strings.ReplaceAll(sh.value, "%s", pw)
				text := "# a config\n" + k.before + k.key + value + "\n"
				line := strings.Count("# a config\n"+k.before, "\n") + 1
				t.Run(fmt.Sprintf("%s%s", k.key, value), func(t *testing.T) {
					_, err := ParseConfig("rotor.toml", []byte(text))
					var errs ConfigErrors
					if !errors.As(err, &errs) || len(errs) != 1 {
						t.Fatalf("want one error, got %v", err)
					}
					path := filepath.Join(dir, "rotor.toml")
					if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
						t.Fatal(err)
					}
					outs := map[string]string{"ParseConfig": err.Error()}
					if _, err := LoadConfig(path); err != nil {
						outs["LoadConfig"] = err.Error()
					}
					if err := CheckConfig(path); err != nil {
						outs["CheckConfig"] = err.Error()
					}
					for where, out := range outs {
						for _, p := range secretPieces(pw) {
							if strings.Contains(out, p) {
								t.Errorf("%s shows %q of the secret:\n%s", where, p, out)
							}
						}
					}
					e := errs[0]
					if e.Line != line || !strings.HasPrefix(e.Msg, k.name+": ") {
						t.Errorf("got %v, want line %d and the key %s", e, line, k.name)
					}
					if sh.unquoted && !strings.Contains(e.Msg, "must be quoted") {
						t.Errorf("got %v, want it to say the value must be quoted", e)
					}
				})
			}
		}
	}
}

// TestConfigSyntaxErrorOtherKeys: a syntax error in a key that holds no
// secret still quotes what the decoder stopped at, and an unquoted value
// right after a secret's line is not taken for the secret's.
func TestConfigSyntaxErrorOtherKeys(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"[pool]\nstrategy = round-robin\n", `rotor.toml:2: expected value but found "round" instead`},
		{"[[client]]\npassword = \"s3cret\"\nusername = scraper\n", `rotor.toml:3: expected value but found "scraper" instead`},
		{"[cooldown.auth_rejected]\nbase = 30s\n", `rotor.toml:2: expected a top-level item to end with a newline, comment, or EOF, but got 's' instead`},
		{"[listen]\nadmin_token = \"a\" # token\nhttp = :8080\n", `rotor.toml:3: expected value but found ':' instead`},
	} {
		_, err := ParseConfig("rotor.toml", []byte(tt.text))
		if err == nil || err.Error() != tt.want {
			t.Errorf("%q: got %v, want %s", tt.text, err, tt.want)
		}
	}
}
