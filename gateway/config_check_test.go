package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/rs/zerolog"
)

// tomlString quotes s as a TOML basic string: unlike Go's %q it never
// writes \x or \a escapes, which TOML does not have.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04X", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// nastyPasswords hold every character that net/url, TOML or a seller's
// format treats specially. Each is built from markers (letter, digit,
// letter…) found nowhere else, so that a leaked piece is seen too.
var nastyPasswords = []string{
	"K7qa#Zx9w", "Mv3b?Jp2c", "Rt5d/Gh6e", "Wq8f@Lk4g", "Np2h%zzYu7i", "Bc4j%41Df5k",
	"Hy6l Tr3m", "Pö8nÜs9o✓", "Xe1p:Vb2q:Cn3r", `Aa4s"Ss5t'`, `Dd6u\Ff7v`, "90817263",
	"Gg8w\tHh9x", "Jj1y]Kk2z[", "#?/@%:Ll3a", "Mm4b#", "?Nn5c", "/Oo6d", "@Pp7e", "Qq8f@",
	"Rr9g #?@/Ss1h", "Tt2i=Uu3j&", "%Vv4k", "Ww5l%", "Xx6m%2", "Yy7n;Zz8o,", "Ab9p+Cd1q",
	"Ef2r!$'()*Gh3s", "Ij4t://Kl5u", "Mn6v\nOp7w", "Qr8x%00St9y", "Uv1z%E2%9C%93Wx2a",
}

// secretPieces are the parts of pw that must never be shown: pw itself and
// every run of three or more letters and digits in it.
func secretPieces(pw string) []string {
	pieces := []string{pw}
	for _, p := range regexp.MustCompile(`[A-Za-z0-9]{3,}`).FindAllString(pw, -1) {
		pieces = append(pieces, p)
	}
	return pieces
}

// urlShapes are the ways a password reaches [[upstream]] url: right and
// wrong URLs, and the seller formats pasted where a URL belongs.
var urlShapes = []string{
	"socks5://scraper:%s@127.0.0.1:18102",
	"http://scraper:%s@gw.example:8000",
	"https://scraper:%s@[::1]:443",
	"socks5://scraper:%s@127.0.0.1:99999",
	"socks5://scraper:%s@127.0.0.1:0",
	"socks5://scraper:%s@127.0.0.1",
	"socks5://scraper:%s@127.0.0.1:notaport",
	"https://scraper:%s@127.0.0.1:443/path",
	"ftp://scraper:%s@127.0.0.1:21",
	"direct://scraper:%s@direct",
	"scraper:%s@127.0.0.1:1080",
	"127.0.0.1:1080:scraper:%s",
	"socks5://127.0.0.1:1080:scraper:%s",
	"socks5://:%s@127.0.0.1:1080",
	"socks5://scraper:%s",
}

// TestConfigPasswordNeverInErrors: whatever an upstream password holds and
// whatever is wrong with its URL, no config error (-check, a rejected
// reload, a start) shows it or a piece of it (bug: '#' and '?' leaked).
// Each URL is written twice, so a valid one fails as a duplicate and its
// error is checked too.
func TestConfigPasswordNeverInErrors(t *testing.T) {
	dir := t.TempDir()
	for _, pw := range nastyPasswords {
		for _, shape := range urlShapes {
			raw := strings.Replace(shape, "%s", pw, 1)
			t.Run(fmt.Sprintf("%q", raw), func(t *testing.T) {
				entry := "[[upstream]]\nname = \"n\"\nurl = " + tomlString(raw) + "\n"
				text := "# padding\n" + entry + entry
				check := func(where, out string) {
					t.Helper()
					for _, p := range secretPieces(pw) {
						if strings.Contains(out, p) {
							t.Errorf("%s shows %q of the password:\n%s", where, p, out)
						}
					}
				}
				_, err := ParseConfig("rotor.toml", []byte(text))
				if err == nil {
					t.Fatalf("config accepted:\n%s", text)
				}
				check("ParseConfig", err.Error())
				var ces ConfigErrors
				if !errors.As(err, &ces) {
					t.Fatalf("error %T is not ConfigErrors", err)
				}
				for _, ce := range ces {
					if ce.Line != 4 && ce.Line != 7 { // the url lines (the name line for the duplicate name)
						if !strings.Contains(ce.Msg, "name") || (ce.Line != 3 && ce.Line != 6) {
							t.Errorf("error at line %d, want a url line (4 or 7): %v", ce.Line, ce)
						}
					}
				}
				path := filepath.Join(dir, "rotor.toml")
				if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
					t.Fatal(err)
				}
				if _, err := LoadConfig(path); err != nil {
					check("LoadConfig", err.Error())
				}
				check("redactURL", redactURL(raw))
				// redactText finds URLs by their scheme, and takes them to
				// end at white space.
				if strings.Contains(shape, "://") && !strings.ContainsAny(pw, " \t\n") {
					check("redactText", redactText(`dial "`+raw+`": refused`))
				}
			})
		}
	}
}

// TestConfigPasswordEnvNeverInErrors: a password from password_env that
// the URL cannot carry is not shown either.
func TestConfigPasswordEnvNeverInErrors(t *testing.T) {
	t.Setenv("ROTOR_TEST_NASTY_PW", "K7qa#Zx9w")
	text := "[[upstream]]\nurl = \"http://scraper@127.0.0.1:3128\"\npassword_env = \"ROTOR_TEST_NASTY_PW\"\npipeline = true\n"
	_, err := ParseConfig("rotor.toml", []byte(text))
	if err == nil || !strings.Contains(err.Error(), "pipeline") {
		t.Fatalf("err = %v, want the pipeline error", err)
	}
	for _, p := range secretPieces("K7qa#Zx9w") {
		if strings.Contains(err.Error(), p) {
			t.Errorf("error shows %q: %v", p, err)
		}
	}
}

// TestConfigClientPasswordAndEnv: a [[client]] with both password and
// password_env is an error at password_env, for -check, a start and a
// reload alike (bug: password_env was silently ignored, so rotating the
// variable left the file's password in force). One or the other is fine.
func TestConfigClientPasswordAndEnv(t *testing.T) {
	t.Setenv("ROTOR_TEST_CLIENT_PW", "fr0m-env-Secret")
	const up = "[[upstream]]\nurl = \"direct://\"\n"
	both := up + "[[client]]\nusername = \"scraper\"\npassword = \"fr0m-file-Secret\"\npassword_env = \"ROTOR_TEST_CLIENT_PW\"\n"
	_, err := ParseConfig("rotor.toml", []byte(both))
	const want = `rotor.toml:6: client "scraper": set password or password_env, not both`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
	if strings.Contains(err.Error(), "Secret") {
		t.Errorf("the error shows a password: %v", err)
	}
	for name, text := range map[string]string{
		"password":     up + "[[client]]\nusername = \"scraper\"\npassword = \"fr0m-file-Secret\"\n",
		"password_env": up + "[[client]]\nusername = \"scraper\"\npassword_env = \"ROTOR_TEST_CLIENT_PW\"\n",
	} {
		cfg, err := ParseConfig("rotor.toml", []byte(text))
		if err != nil {
			t.Errorf("%s alone: %v", name, err)
			continue
		}
		if got := cfg.Clients[0].Password; !strings.HasSuffix(got, "-Secret") {
			t.Errorf("%s alone: password %q", name, got)
		}
	}

	// A reload of such a file is refused and the running credentials stay.
	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.toml")
	listen := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n"
	writeFiles(t, dir, map[string]string{"rotor.toml": listen + up + "[[client]]\nusername = \"scraper\"\npassword = \"old-pw\"\n"})
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"rotor.toml": listen + both})
	if err := srv.ReloadFile(); err == nil || !strings.Contains(err.Error(), "set password or password_env, not both") {
		t.Errorf("reload: %v, want the error", err)
	}
	if got := srv.Config().Clients[0].Password; got != "old-pw" {
		t.Errorf("after the refused reload the client password is %q, want the running one", got)
	}
}

// durationKeys lists the dotted TOML key of every time.Duration field of
// t, tables included: the test walks the type, so a duration key added
// later is covered without editing the test.
func durationKeys(t reflect.Type, prefix string) []string {
	var keys []string
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || len(f.Index) > 1 {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "" || name == "-" {
			continue
		}
		switch {
		case f.Type == reflect.TypeFor[time.Duration]():
			keys = append(keys, prefix+name)
		case f.Type.Kind() == reflect.Struct:
			keys = append(keys, durationKeys(f.Type, prefix+name+".")...)
		}
	}
	return keys
}

// durationConf sets the dotted key to value in an otherwise valid config.
func durationConf(key, value string) string {
	table, k := "", key
	if i := strings.LastIndex(key, "."); i >= 0 {
		table, k = key[:i], key[i+1:]
	}
	text := k + " = " + value + "\n"
	if table != "" {
		text = "[" + table + "]\n" + text
	}
	return text + "[[upstream]]\nurl = \"direct://\"\n"
}

// TestConfigDurationsMustBeStrings: the contract's durations are Go
// duration strings. A number anywhere a duration goes is an error at its
// line (bug: "timeout = 5" was 5ns, and every probe failed).
func TestConfigDurationsMustBeStrings(t *testing.T) {
	keys := durationKeys(reflect.TypeFor[Config](), "")
	for _, want := range []string{"shutdown_grace", "tunnel_idle_timeout", "listen.handshake_timeout",
		"pool.wait_for_upstream", "pool.slow_start", "pool.connect_timeout", "pool.handshake_timeout", "pool.session_ttl",
		"probe.timeout", "cooldown.refused.base", "cooldown.target_http_error.max", "slow_body.first_byte", "slow_body.stall",
		"cluster.lease_ttl"} {
		found := false
		for _, k := range keys {
			found = found || k == want
		}
		if !found {
			t.Errorf("duration key %s not found by the walk (found %v)", want, keys)
		}
	}
	for _, key := range keys {
		line := strings.Count(durationConf(key, "0"), "\n") - 2
		for _, tc := range []struct{ value, want string }{
			{"5", "the integer 5"},
			{"10", "the integer 10"},
			{"2.5", "the float 2.5"},
			{"true", "the boolean true"},
			{"[1]", "an array"},
		} {
			t.Run(key+"="+tc.value, func(t *testing.T) {
				_, err := ParseConfig("d.toml", []byte(durationConf(key, tc.value)))
				want := fmt.Sprintf("d.toml:%d: %s: want a duration string like \"5s\", got %s", line, key, tc.want)
				if err == nil || err.Error() != want {
					t.Errorf("err = %v\nwant   %s", err, want)
				}
			})
		}
		t.Run(key+"=bad string", func(t *testing.T) {
			_, err := ParseConfig("d.toml", []byte(durationConf(key, `"5 seconds"`)))
			want := fmt.Sprintf("d.toml:%d: %s: invalid duration \"5 seconds\"", line, key)
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("err = %v, want %s…", err, want)
			}
		})
		t.Run(key+"=string", func(t *testing.T) {
			_, err := ParseConfig("d.toml", []byte(durationConf(key, `"5s"`)))
			if err != nil && strings.Contains(err.Error(), "duration") {
				t.Errorf("\"5s\" refused: %v", err)
			}
		})
	}
	t.Run("several at once, in line order", func(t *testing.T) {
		text := "[probe]\ntimeout = 5\n[listen]\nhandshake_timeout = 10\n[cooldown.refused]\nbase = 1.5\n[[upstream]]\nurl = \"direct://\"\n"
		_, err := ParseConfig("d.toml", []byte(text))
		want := `d.toml:2: probe.timeout: want a duration string like "5s", got the integer 5
d.toml:4: listen.handshake_timeout: want a duration string like "5s", got the integer 10
d.toml:6: cooldown.refused.base: want a duration string like "5s", got the float 1.5`
		if err == nil || err.Error() != want {
			t.Errorf("err = %v\nwant %s", err, want)
		}
	})
}

// freeLoopbackPort returns a port nothing listens on right now.
func freeLoopbackPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	ln.Close()
	return port
}

// TestConfigRefusesWhatStartRefuses: every [listen] setting that makes
// Start fail is a config error at the line of its key, so -check and a
// reload fail on it too (bug: -check passed, then "start failed"). The
// same settings are given to Start directly, past ParseConfig, to show
// that it does refuse them.
func TestConfigRefusesWhatStartRefuses(t *testing.T) {
	t.Setenv("ROTOR_TEST_UNSET_TOKEN", "")
	port := freeLoopbackPort(t)
	tests := []struct {
		name   string
		listen string // the [listen] table; its line 1 is line 1 of the file
		line   int
		want   string
		// start: also Start it (never when it would bind beyond loopback)
		start bool
	}{
		{"socks5 on 0.0.0.0, no client", "socks5 = \"0.0.0.0:18790\"\nhttp = \"\"\nadmin = \"\"", 2, "refusing to start an open proxy: 0.0.0.0:18790", true},
		{"socks5 on [::]", "http = \"\"\nadmin = \"\"\nsocks5 = \"[::]:18790\"", 4, "open proxy", true},
		{"socks5 on every interface", "http = \"\"\nsocks5 = \":18790\"\nadmin = \"\"", 3, "open proxy", true},
		{"http on a LAN address", "socks5 = \"\"\nhttp = \"10.1.2.3:8080\"\nadmin = \"\"", 3, "open proxy", true},
		{"admin beyond loopback, no token", "socks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"0.0.0.0:19090\"", 4, "listen.admin 0.0.0.0:19090 is not a loopback address and no admin_token", true},
		{"admin_token_env unset", "socks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin_token_env = \"ROTOR_TEST_UNSET_TOKEN\"\nadmin = \"0.0.0.0:19090\"", 5, "admin_token_env names ROTOR_TEST_UNSET_TOKEN, which is empty or unset", true},
		{"unknown port", "socks5 = \"127.0.0.1:notaport\"\nhttp = \"\"\nadmin = \"\"", 2, "listen.socks5: unknown port \"notaport\"", true},
		{"port out of range", "socks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"localhost:99999\"", 4, "listen.admin: port 99999 is out of range (0-65535)", true},
		{"not host:port", "socks5 = \"127.0.0.1\"\nhttp = \"\"\nadmin = \"\"", 2, "listen.socks5: \"127.0.0.1\" is not host:port", true},
		{"two fronts on one address", "socks5 = \"127.0.0.1:" + port + "\"\nhttp = \"127.0.0.1:" + port + "\"\nadmin = \"\"", 3, "listen.http: 127.0.0.1:" + port + " is already listen.socks5's address", true},
		{"localhost is 127.0.0.1", "socks5 = \"127.0.0.1:" + port + "\"\nhttp = \"\"\nadmin = \"localhost:" + port + "\"", 4, "listen.admin: localhost:" + port + " is already listen.socks5's address", true},
		{"a wildcard covers loopback", "allow_open = true\nsocks5 = \"0.0.0.0:" + port + "\"\nhttp = \"127.0.0.1:" + port + "\"\nadmin = \"\"", 4, "is already listen.socks5's address", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := "[listen]\n" + tt.listen + "\n[[upstream]]\nurl = \"direct://\"\n"
			_, err := ParseConfig("l.toml", []byte(text))
			want := fmt.Sprintf("l.toml:%d: ", tt.line)
			if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseConfig: %v\nwant %s…%s…", err, want, tt.want)
			}
			if !tt.start {
				return
			}
			// The same [listen] past validation: Start must refuse it.
			cfg, err := ParseConfig("ok.toml", []byte("[[upstream]]\nurl = \"direct://\"\n"))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := decodeListen(tt.listen, &cfg.Listen); err != nil {
				t.Fatal(err)
			}
			srv, err := New(cfg, Options{Log: zerolog.Nop()})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err == nil {
				t.Errorf("Start accepted what ParseConfig refuses")
			}
			_ = srv.Shutdown(t.Context())
		})
	}
	for _, ok := range []string{
		"socks5 = \"0.0.0.0:0\"\nallow_open = true\nadmin = \"\"",
		"socks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"", // 0: a free port each
		"socks5 = \"127.0.0.1:1080\"\nhttp = \"[::1]:1080\"\nadmin = \"\"",
		"socks5 = \"0.0.0.0:1080\"\nhttp = \"[::1]:1080\"\nadmin = \"\"\nallow_open = true",
		"admin = \"0.0.0.0:9090\"\nadmin_token = \"t0ken\"",
		"socks5 = \"127.0.0.1:socks\"\nhttp = \"localhost:http\"", // service names, as net.Listen takes them
	} {
		t.Run("accepted/"+ok, func(t *testing.T) {
			if _, err := ParseConfig("l.toml", []byte("[listen]\n"+ok+"\n[[upstream]]\nurl = \"direct://\"\n")); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
	t.Run("with a client", func(t *testing.T) {
		text := "[listen]\nsocks5 = \"0.0.0.0:1080\"\nhttp = \"[::]:8080\"\n[[client]]\nusername = \"u\"\npassword = \"pw\"\n[[upstream]]\nurl = \"direct://\"\n"
		if _, err := ParseConfig("l.toml", []byte(text)); err != nil {
			t.Errorf("refused: %v", err)
		}
	})
}

// decodeListen fills l from the body of a [listen] table and resolves
// admin_token_env as ParseConfig does, without validating.
func decodeListen(body string, l *ListenConfig) (*ListenConfig, error) {
	var wrap struct {
		Listen ListenConfig `toml:"listen"`
	}
	wrap.Listen = *l
	if _, err := toml.Decode("[listen]\n"+body+"\n", &wrap); err != nil {
		return nil, err
	}
	*l = wrap.Listen
	if l.AdminToken == "" && l.AdminTokenEnv != "" {
		l.AdminToken = os.Getenv(l.AdminTokenEnv)
	}
	return l, nil
}

// TestConfigUpstreamURLChecks: [[upstream]] url is checked as strictly as
// a list-file line, and its errors point at the url line.
func TestConfigUpstreamURLChecks(t *testing.T) {
	tests := []struct {
		url  string
		want string // "" = valid
	}{
		{"socks5://u:pw@127.0.0.1:1080", ""},
		{"http://127.0.0.1:3128/", ""},
		{"https://[::1]:443", ""},
		{"direct://", ""},
		{"socks5://u:pw@127.0.0.1:99999", `"socks5://u:xxxxx@127.0.0.1:99999": invalid port (want 1-65535)`},
		{"socks5://127.0.0.1:0", `"socks5://127.0.0.1:0": invalid port`},
		{"socks5://127.0.0.1:65536", `"socks5://127.0.0.1:65536": invalid port`},
		{"socks5://127.0.0.1", "missing port"},
		{"socks5://127.0.0.1:", "missing port"},
		{"socks5://:1080", "missing host"},
		{"socks5://127.0.0.1:x1080", "invalid url (invalid port after host)"},
		{"https://127.0.0.1:443/path", "unexpected path, query or fragment"},
		{"http://127.0.0.1:3128?x=1", "unexpected path, query or fragment"},
		{"http://127.0.0.1:3128#frag", "unexpected path, query or fragment"},
		{"direct://foo:80", "direct:// takes no host"},
		{"direct://u:pw@", "direct:// takes no host"},
		{"direct:///x", "unexpected path"},
		{"127.0.0.1:1080", "want scheme://[user:pass@]host:port"},
		{"10.0.0.1:1080:u:pw", "host:port:user:pass is a list-file format"},
		{"socks5://u2:Hash#Secret9@127.0.0.1:18102", "percent-encode them in the password"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			text := "[[upstream]]\nname = \"n\"\n\nurl = " + tomlString(tt.url) + "\n"
			_, err := ParseConfig("u.toml", []byte(text))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want == "":
			case err == nil:
				t.Errorf("accepted, want %q", tt.want)
			case !strings.HasPrefix(err.Error(), "u.toml:4: ") || !strings.Contains(err.Error(), tt.want):
				t.Errorf("err = %v, want u.toml:4: …%s…", err, tt.want)
			}
		})
	}
	t.Run("second entry points at its own url line", func(t *testing.T) {
		text := "[[upstream]]\nurl = \"direct://\"\n[[upstream]]\nname = \"x\"\nurl = \"socks5://127.0.0.1:0\"\n"
		_, err := ParseConfig("u.toml", []byte(text))
		if err == nil || !strings.HasPrefix(err.Error(), "u.toml:5: ") {
			t.Errorf("err = %v, want u.toml:5:", err)
		}
	})
	t.Run("password_env points at its line", func(t *testing.T) {
		text := "[[upstream]]\nurl = \"socks5://u@127.0.0.1:1080\"\npassword_env = \"ROTOR_TEST_UNSET_UPSTREAM_PW\"\n"
		_, err := ParseConfig("u.toml", []byte(text))
		if err == nil || !strings.HasPrefix(err.Error(), "u.toml:3: ") || !strings.Contains(err.Error(), "ROTOR_TEST_UNSET_UPSTREAM_PW") {
			t.Errorf("err = %v, want u.toml:3: …ROTOR_TEST_UNSET_UPSTREAM_PW…", err)
		}
	})
}

// TestConfigDecodeErrorsFileLine: the decoder's type errors come out as
// FILE:LINE: key: message, the line being that of the bad value even in
// a later [[table]] element, with no "toml: line N" noise and no value.
func TestConfigDecodeErrorsFileLine(t *testing.T) {
	tests := []struct{ name, text, want string }{
		{"string for an array in the second element",
			"[[upstream]]\nurl = \"direct://\"\ntags = [\"a\"]\n[[upstream]]\nurl = \"socks5://127.0.0.1:1\"\ntags = \"x\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:2\"\ntags = [\"y\"]\n",
			"t.toml:6: upstream.tags: want an array, got a string"},
		{"integer for a string", "[listen]\nsocks5 = 1080\n[[upstream]]\nurl = \"direct://\"\n",
			"t.toml:2: listen.socks5: want a string, got an integer"},
		{"integer for a table", "listen = 5\n[[upstream]]\nurl = \"direct://\"\n",
			"t.toml:1: listen: want a table, got an integer"},
		{"string for a number", "[pool]\nmax_attempts = \"3\"\n[[upstream]]\nurl = \"direct://\"\n",
			"t.toml:2: pool.max_attempts: want an integer, got a string"},
		{"a password is not echoed", "[[client]]\nusername = \"a\"\npassword = 918273645\n[[upstream]]\nurl = \"direct://\"\n",
			"t.toml:3: client.password: want a string, got an integer"},
		{"string for a boolean", "[[upstream]]\nurl = \"direct://\"\ndisabled = \"yes\"\n",
			"t.toml:3: upstream.disabled: want true or false, got a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("t.toml", []byte(tt.text))
			if err == nil || err.Error() != tt.want {
				t.Errorf("err = %v\nwant   %s", err, tt.want)
			}
		})
	}
}

// TestConfigExplicitZeroMeansNone: a zero written in the file is none,
// not the default. Issue: jitter = 0.0 gave ±20 %, slow_start = "0s"
// still ramped 4, 8, 16 tunnels/s, and wait_for_upstream = "0s" waited
// 10 s.
func TestConfigExplicitZeroMeansNone(t *testing.T) {
	base := "[[upstream]]\nurl = \"socks5://127.0.0.1:1080\"\n"
	zero, err := ParseConfig("zero.toml", []byte("[pool]\nwait_for_upstream = \"0s\"\nslow_start = \"0s\"\n[cooldown]\njitter = 0.0\n"+base))
	if err != nil {
		t.Fatal(err)
	}
	if zero.Cooldown.Jitter >= 0 || zero.Pool.SlowStart >= 0 || zero.Pool.WaitForUpstream <= 0 || zero.Pool.WaitForUpstream > time.Millisecond {
		t.Errorf("explicit zeros: jitter %v slow_start %v wait_for_upstream %v, want none, none, at once",
			zero.Cooldown.Jitter, zero.Pool.SlowStart, zero.Pool.WaitForUpstream)
	}
	unset, err := ParseConfig("unset.toml", []byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if unset.Cooldown.Jitter != 0 || unset.Pool.SlowStart != 0 || unset.Pool.WaitForUpstream != 10*time.Second {
		t.Errorf("unset: jitter %v slow_start %v wait_for_upstream %v, want the defaults (0 = default in health, 10s)",
			unset.Cooldown.Jitter, unset.Pool.SlowStart, unset.Pool.WaitForUpstream)
	}
	// End to end: nothing eligible and no wait is an answer at once.
	srv, _ := startGateway(t, "[pool]\nwait_for_upstream = \"0s\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:1\"\ndisabled = true\n")
	start := time.Now()
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://127.0.0.1:1/", false)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("nothing eligible: %v %v, want 503", resp, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("wait_for_upstream = \"0s\" answered after %v, want at once", d)
	}
}

// TestCheckUpstreamEntryErrorsAtTheirKeys: a bad url does not hide its
// entry's other errors; pipeline errors are at the pipeline line; a bad
// list-file scheme is one error, not three. Issue: the scheme error hid
// weight and max_conns, pipeline pointed at the [[upstream]] header, and
// a bad scheme added two line-less errors, one claiming the list empty.
func TestCheckUpstreamEntryErrorsAtTheirKeys(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "l2.txt"), []byte("127.0.0.1:1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "b4.toml")
	text := "[[upstream]]\nurl = \"ftp://127.0.0.1:21\"\nweight = -2\nmax_conns = -1\n\n" +
		"[[upstream]]\nurl = \"http://127.0.0.1:1085\"\npipeline = true\n\n" +
		"[[upstream_file]]\npath = \"l2.txt\"\nscheme = \"gopher\"\npipeline = true\n"
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	err := CheckConfig(p)
	if err == nil {
		t.Fatal("CheckConfig accepted the file")
	}
	got := strings.Split(strings.TrimSpace(err.Error()), "\n")
	want := []string{p + ":2: ", p + ":3: ", p + ":4: ", p + ":8: ", p + ":12: ", p + ":13: "}
	if len(got) != len(want) {
		t.Fatalf("%d errors, want %d:\n%s", len(got), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("error %d = %q, want it at %s", i, got[i], w)
		}
	}
}

// TestConfigClientNamesThatCannotLogIn: a [[client]] username the fronts
// would read as carrying parameters, or credentials SOCKS5 cannot carry,
// are refused by -check instead of failing every login.
func TestConfigClientNamesThatCannotLogIn(t *testing.T) {
	long := strings.Repeat("u", 256)
	tests := []struct {
		name, client, want string
		line               int
	}{
		{"session parameter", "username = \"ops-session-1\"\npassword = \"pw3\"", "client \"ops-session-1\": a username cannot contain \"-session-<id>\"", 2},
		{"tag parameter", "password = \"pw3\"\nusername = \"team-tag-us\"", "client \"team-tag-us\": a username cannot contain", 3},
		{"username over 255 bytes", "username = \"" + long + "\"\npassword = \"pw\"", "client: username is 256 bytes; SOCKS5 (RFC 1929) carries at most 255", 2},
		{"password over 255 bytes", "username = \"u\"\npassword = \"" + long + "\"", "client \"u\": password is 256 bytes", 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			text := "[[client]]\n" + tt.client + "\n[[upstream]]\nurl = \"direct://\"\n"
			_, err := ParseConfig("c.toml", []byte(text))
			want := fmt.Sprintf("c.toml:%d: ", tt.line)
			if err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseConfig: %v\nwant %s…%s…", err, want, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), long[:40]) && strings.Contains(tt.client, "password = \""+long) {
				t.Error("the password is in the error")
			}
		})
	}
	// Names that only look alike log in and pass.
	for _, u := range []string{"ops-1", "session", "tag", "my-tagger", "a-session"} {
		if _, err := ParseConfig("c.toml", []byte("[[client]]\nusername = \""+u+"\"\npassword = \"pw\"\n[[upstream]]\nurl = \"direct://\"\n")); err != nil {
			t.Errorf("username %q: %v", u, err)
		}
	}
}

// TestConfigTagsClientsCanAskFor: -check accepted tags no client can name
// in its username ("us-east": "scraper-tag-us-east" was read as a plain
// user name and the tag dropped; "", "a b", "a:b"), and two [[client]]
// entries of one username, whose two passwords both logged in.
func TestConfigTagsClientsCanAskFor(t *testing.T) {
	text := strings.Join([]string{
		"[[upstream]]",
		"url = \"direct://\"",
		"tags = [\"us-east\", \"\", \"a b\", \"us_east\", \"de.1\", \"Zürich\"]", // 3
		"[[upstream_file]]",
		"path = \"l.txt\"",
		"tags = [\"x:y\"]", // 6
		"[[client]]",
		"username = \"scraper\"", // 8
		"password = \"Pw1first7Qx\"",
		"[[client]]",
		"username = \"scraper\"", // 11
		"password = \"Pw2second9Zk\"",
	}, "\n") + "\n"
	_, err := ParseConfig("t.toml", []byte(text))
	if err == nil {
		t.Fatal("ParseConfig accepted the file")
	}
	want := []string{
		`t.toml:3: upstream tags: tag "us-east" contains '-'`,
		`t.toml:3: upstream tags: a tag must not be empty`,
		`t.toml:3: upstream tags: tag "a b" contains white space`,
		`t.toml:6: upstream_file tags: tag "x:y" contains white space, ':'`,
		`t.toml:11: client "scraper" duplicates the one at line 8`,
	}
	got := strings.Split(err.Error(), "\n")
	if len(got) != len(want) {
		t.Fatalf("got:\n%s\nwant %d errors", err, len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d = %q, want %q…", i, got[i], want[i])
		}
	}
	if strings.Contains(err.Error(), "first7Qx") || strings.Contains(err.Error(), "second9Zk") {
		t.Error("a password is in the errors")
	}
}

// TestConfigZerosThatMeanNothing: a zero the file sets where the packages
// read zero as "the default" passed -check and was the default
// (probe.rate = 0 started 10 probes a second, pool.max_attempts = 0 tried 3
// upstreams, "0s" timeouts were 5 or 10 s), and slow_start = "-1s" was
// accepted beside the documented "0s". Each is an error at its line; a
// zero with a meaning of its own means it.
func TestConfigZerosThatMeanNothing(t *testing.T) {
	text := strings.Join([]string{
		"[listen]",
		"handshake_timeout = \"0s\"", // 2
		"[pool]",
		"max_attempts = 0",         // 4
		"connect_timeout = \"0s\"", // 5
		"handshake_timeout = \"0s\"",
		"session_ttl = \"0s\"",
		"retry_body_limit = 0",
		"slow_start = \"-1s\"", // 9
		"[probe]",
		"timeout = \"0s\"", // 11
		"max_concurrent = 0",
		"rate = 0",
		"expect_status = []",
		"[cooldown]",
		"multiplier = 0", // 16
		"[cooldown.refused]",
		"base = \"0s\"", // 18
		"max = \"0s\"",
		"after = 0",
		"[slow_body]",
		"first_byte = \"-1s\"", // 22
		"stall = \"-2s\"",
		"[[upstream]]",
		"url = \"socks5://u:Pw9secret@127.0.0.1:1080\"",
		"weight = 0", // 26
	}, "\n") + "\n"
	_, err := ParseConfig("z.toml", []byte(text))
	if err == nil {
		t.Fatal("ParseConfig accepted the file")
	}
	want := []string{
		"z.toml:2: listen.handshake_timeout: must be more than 0s (10s when left out)",
		"z.toml:4: pool.max_attempts: must be >= 1 (got 0; 3 when left out)",
		"z.toml:5: pool.connect_timeout: must be more than 0s (5s when left out)",
		"z.toml:6: pool.handshake_timeout: must be more than 0s (10s when left out)",
		"z.toml:7: pool.session_ttl: must be more than 0s (10m0s when left out)",
		"z.toml:8: pool.retry_body_limit: must be >= 1 (got 0; 65536 when left out)",
		"z.toml:9: pool.slow_start: must not be negative (got -1s; \"0s\": no ramp)",
		"z.toml:11: probe.timeout: must be more than 0s (5s when left out)",
		"z.toml:12: probe.max_concurrent: must be >= 1 (got 0; 8 when left out)",
		"z.toml:13: probe.rate: must be more than 0 (got 0; 10 when left out)",
		"z.toml:14: probe.expect_status: must list at least one status ([200] when left out)",
		"z.toml:16: cooldown.multiplier: must be >= 1 (got 0; 2 when left out)",
		"z.toml:18: cooldown.refused.base: must be more than 0s (30s when left out)",
		"z.toml:19: cooldown.refused.max: must be more than 0s (10m0s when left out)",
		"z.toml:20: cooldown.refused.after: must be >= 1 (got 0; 1 when left out)",
		"z.toml:22: slow_body.first_byte: must not be negative (got -1s; \"0s\" turns the check off)",
		"z.toml:23: slow_body.stall: must not be negative (got -2s; \"0s\" turns the check off)",
		"z.toml:26: upstream socks5://u:xxxxx@127.0.0.1:1080: weight must be >= 1 (got 0; 1 when left out; disabled = true takes an upstream out of rotation)",
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}

	// Zeros with a meaning of their own, and the documented ones, pass.
	ok := "shutdown_grace = \"0s\"\ntunnel_idle_timeout = \"0s\"\n[listen]\nmax_connections = 0\n[slow_body]\nfirst_byte = \"0s\"\nstall = \"0s\"\n" +
		"[cooldown.refused]\npermanent_after = 0\n[metrics]\nper_upstream_limit = 0\n[[upstream]]\nurl = \"direct://\"\nmax_conns = 0\nrate = 0\n"
	cfg, err := ParseConfig("ok.toml", []byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ShutdownGrace != 0 || cfg.SlowBody.FirstByte >= 0 || cfg.SlowBody.Stall >= 0 {
		t.Errorf("shutdown_grace %v, slow_body %v / %v; want 0 (close at once) and off, off", cfg.ShutdownGrace, cfg.SlowBody.FirstByte, cfg.SlowBody.Stall)
	}
	unset, err := ParseConfig("unset.toml", []byte("[[upstream]]\nurl = \"direct://\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if unset.ShutdownGrace != 30*time.Second || unset.SlowBody.FirstByte != 10*time.Second || unset.SlowBody.Stall != 30*time.Second {
		t.Errorf("unset: shutdown_grace %v, slow_body %v / %v; want the defaults", unset.ShutdownGrace, unset.SlowBody.FirstByte, unset.SlowBody.Stall)
	}
}

// TestConfigSyntaxErrorLine: an unterminated "[listen" header on line 1
// was reported at line 2 (the decoder counts the newline it stopped at).
// A syntax error is reported at the line of the byte it is about.
func TestConfigSyntaxErrorLine(t *testing.T) {
	for _, tt := range []struct {
		text string
		line int
	}{
		{"[listen\nsocks5 = \"127.0.0.1:1080\"\n", 1},
		{"state_file = \"\"\n[listen\n", 2},
		{"\n\n[[client]\nusername = \"a\"\n", 3},
		{"[pool]\nmax_attempts = 3\nmax_attempts = 4\n", 3},
		{"shutdown_grace = \"1s\" 2\n", 1},
		{"[listen", 1},
	} {
		_, err := ParseConfig("s.toml", []byte(tt.text))
		var errs ConfigErrors
		if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Line != tt.line {
			t.Errorf("%q: %v, want one error at line %d", tt.text, err, tt.line)
		}
	}
}

// TestConfigWarnings: -check prints warnings for a config that is valid
// but will not do what it seems to (it still exits 0).
func TestConfigWarnings(t *testing.T) {
	for _, tt := range []struct{ name, text, want string }{
		{"a private probe host behind direct", "[probe]\nurl = \"http://127.0.0.1:9/health\"\n[[upstream]]\nurl = \"direct://\"\n",
			"probe.url host 127.0.0.1 is a loopback or private address"},
		{"a redis database a default Redis rejects", "[cluster]\nredis = \"redis://:pw-db-9@127.0.0.1:6379/99\"\ninstance = \"a\"\n[[upstream]]\nurl = \"direct://\"\n",
			"cluster.redis: database 99 is above 15"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := ParseConfig("w.toml", []byte(tt.text))
			if err != nil {
				t.Fatal(err)
			}
			w := strings.Join(cfg.Warnings(), "\n")
			if !strings.Contains(w, tt.want) || strings.Contains(w, "pw-db-9") {
				t.Errorf("warnings %q, want %q and no password", w, tt.want)
			}
		})
	}
	cfg, err := ParseConfig("w.toml", []byte("[[upstream]]\nurl = \"direct://\"\n"))
	if err != nil || len(cfg.Warnings()) != 0 {
		t.Errorf("a plain config warns: %v %v", cfg.Warnings(), err)
	}
}

// TestConfigPasswordEnvChecked: a socks5 password from password_env gets
// the checks the URL's own gets (bug: one over 255 bytes passed -check and
// failed the start), and the error does not show it.
func TestConfigPasswordEnvChecked(t *testing.T) {
	long := strings.Repeat("Zq9", 100)
	t.Setenv("ROTOR_TEST_LONG_PW", long)
	text := "[[upstream]]\nurl = \"socks5://u@127.0.0.1:1080\"\npassword_env = \"ROTOR_TEST_LONG_PW\"\n"
	_, err := ParseConfig("rotor.toml", []byte(text))
	if err == nil || !strings.Contains(err.Error(), "rotor.toml:3:") || !strings.Contains(err.Error(), "255 bytes") {
		t.Fatalf("err = %v, want the 255-byte limit at password_env's line", err)
	}
	if strings.Contains(err.Error(), long[:20]) {
		t.Errorf("error shows the password: %v", err)
	}
}

// TestConfigAdminTokenAndEnv: [listen] with both admin_token and
// admin_token_env is an error at admin_token_env (bug: the file's token
// silently won, so rotating the variable changed nothing). Either alone is
// fine, and the error shows neither token.
func TestConfigAdminTokenAndEnv(t *testing.T) {
	t.Setenv("ROTOR_TEST_ADMIN_TOKEN", "env-Tok3n")
	const up = "[[upstream]]\nurl = \"direct://\"\n"
	both := "[listen]\nadmin_token = \"file-Tok3n\"\nadmin_token_env = \"ROTOR_TEST_ADMIN_TOKEN\"\n" + up
	_, err := ParseConfig("rotor.toml", []byte(both))
	const want = `rotor.toml:3: listen: set admin_token or admin_token_env, not both`
	if err == nil || err.Error() != want {
		t.Fatalf("err = %v, want %s", err, want)
	}
	if strings.Contains(err.Error(), "Tok3n") {
		t.Errorf("the error shows a token: %v", err)
	}
	for name, text := range map[string]string{
		"admin_token":     "[listen]\nadmin_token = \"file-Tok3n\"\n" + up,
		"admin_token_env": "[listen]\nadmin_token_env = \"ROTOR_TEST_ADMIN_TOKEN\"\n" + up,
	} {
		cfg, err := ParseConfig("rotor.toml", []byte(text))
		if err != nil {
			t.Errorf("%s alone: %v", name, err)
			continue
		}
		if got := cfg.Listen.AdminToken; !strings.HasSuffix(got, "-Tok3n") {
			t.Errorf("%s alone: token %q", name, got)
		}
	}
}
