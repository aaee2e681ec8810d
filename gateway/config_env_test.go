package gateway

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestConfigAdminTokenEnvUnset: an admin_token_env naming a variable that
// is unset or empty is an error at admin_token_env, as for password_env,
// wherever the admin API listens (bug: on loopback the admin API silently
// ran with no token and -check said ok). A reload of such a file is
// refused and the running token stays.
func TestConfigAdminTokenEnvUnset(t *testing.T) {
	t.Setenv("ROTOR_TEST_EMPTY_ADMIN_TOKEN", "")
	const up = "[[upstream]]\nurl = \"direct://\"\n"
	for name, tc := range map[string]struct{ text, want string }{
		"unset, admin on loopback": {"[listen]\nadmin = \"127.0.0.1:0\"\nadmin_token_env = \"ROTOR_TEST_UNSET_ADMIN_TOKEN\"\n" + up,
			`rotor.toml:3: listen.admin_token_env: environment variable ROTOR_TEST_UNSET_ADMIN_TOKEN is empty or unset`},
		"empty, admin on loopback": {"[listen]\nadmin_token_env = \"ROTOR_TEST_EMPTY_ADMIN_TOKEN\"\n" + up,
			`rotor.toml:2: listen.admin_token_env: environment variable ROTOR_TEST_EMPTY_ADMIN_TOKEN is empty or unset`},
		"unset, admin off": {"[listen]\nadmin = \"\"\nadmin_token_env = \"ROTOR_TEST_UNSET_ADMIN_TOKEN\"\n" + up,
			`rotor.toml:3: listen.admin_token_env: environment variable ROTOR_TEST_UNSET_ADMIN_TOKEN is empty or unset`},
		// Beyond loopback the admin address's own error says it (one
		// error for one problem).
		"unset, admin beyond loopback": {"[listen]\nadmin = \"0.0.0.0:19090\"\nadmin_token_env = \"ROTOR_TEST_UNSET_ADMIN_TOKEN\"\n" + up,
			`rotor.toml:2: refusing to start: listen.admin 0.0.0.0:19090 is not a loopback address and no admin_token (or admin_token_env) is set (admin_token_env names ROTOR_TEST_UNSET_ADMIN_TOKEN, which is empty or unset)`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseConfig("rotor.toml", []byte(tc.text))
			if err == nil || err.Error() != tc.want {
				t.Errorf("err = %v\nwant %s", err, tc.want)
			}
		})
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.toml")
	listen := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n"
	writeFiles(t, dir, map[string]string{"rotor.toml": listen + "admin_token = \"old-Tok3n\"\n" + up})
	cfg, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"rotor.toml": listen + "admin_token_env = \"ROTOR_TEST_UNSET_ADMIN_TOKEN\"\n" + up})
	if err := srv.ReloadFile(); err == nil || !strings.Contains(err.Error(), "rotor.toml:5: listen.admin_token_env: environment variable ROTOR_TEST_UNSET_ADMIN_TOKEN is empty or unset") {
		t.Errorf("reload: %v, want the error at admin_token_env", err)
	}
	if got := srv.Config().Listen.AdminToken; got != "old-Tok3n" {
		t.Errorf("after the refused reload the admin token is %q, want the running one", got)
	}
}

// TestConfigClientWithoutPassword: a [[client]] with a username and no
// password (no key, an empty one, or password_env naming an unset
// variable) is an error at its line, never a client that logs in with an
// empty password.
func TestConfigClientWithoutPassword(t *testing.T) {
	const up = "[[upstream]]\nurl = \"direct://\"\n"
	for name, tc := range map[string]struct{ text, want string }{
		"no password key": {up + "[[client]]\nusername = \"bob\"\n", `rotor.toml:3: client "bob": password (or password_env) is required`},
		"empty password":  {up + "[[client]]\nusername = \"bob\"\npassword = \"\"\n", `rotor.toml:5: client "bob": password (or password_env) is required`},
		"unset password_env": {up + "[[client]]\nusername = \"bob\"\npassword_env = \"ROTOR_TEST_UNSET_CLIENT_PW\"\n",
			`rotor.toml:5: client "bob": environment variable ROTOR_TEST_UNSET_CLIENT_PW is empty or unset`},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseConfig("rotor.toml", []byte(tc.text)); err == nil || err.Error() != tc.want {
				t.Errorf("err = %v\nwant %s", err, tc.want)
			}
		})
	}
}
