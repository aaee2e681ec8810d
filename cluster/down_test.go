package cluster

import (
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// warnings returns the warning lines in logs holding msg.
func warnings(logs *syncBuf, msg string) []string {
	var out []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"level":"warn"`) && strings.Contains(l, msg) {
			out = append(out, l)
		}
	}
	return out
}

// TestClusterOutageNamesTheCause: with Redis killed, the outage warning
// says why (bug: "context deadline exceeded", go-redis retrying refused
// dials until the command's deadline, hid "connection refused"), and it
// is still logged once.
func TestClusterOutageNamesTheCause(t *testing.T) {
	rd := clustertest.Start(t)
	c, _, logs := newLoggedMember(t, rd, "a")
	c.mu.Lock()
	c.downEvery = 100 * time.Millisecond // only a refusal by Redis repeats; not this
	c.mu.Unlock()
	rd.Stop()
	const msg = "redis unreachable"
	waitUntil(t, 10*time.Second, "the outage warning", func() bool { return len(warnings(logs, msg)) > 0 })
	w := warnings(logs, msg)[0]
	if !strings.Contains(w, "connection refused") || strings.Contains(w, "deadline exceeded") {
		t.Errorf("outage warning %s, want the dial's connection refused", w)
	}
	time.Sleep(2500 * time.Millisecond) // a few checks (one a second) fail meanwhile
	if n := len(warnings(logs, msg)); n != 1 {
		t.Errorf("%d outage warnings, want 1:\n%s", n, logs.String())
	}
}

// TestClusterWrongPasswordWarns: a wrong (WRONGPASS) or missing (NOAUTH)
// password is said to be one, naming where the password comes from, and
// repeated while it lasts (bug: one "redis unreachable" warning, never
// again; then: the hint named redis_password_env for a password in the
// URL's userinfo too); no password appears in the log.
func TestClusterWrongPasswordWarns(t *testing.T) {
	rd := clustertest.Start(t)
	if got := rd.Do("CONFIG", "SET", "requirepass", "s3cret-right"); got != "+OK" {
		t.Fatalf("CONFIG SET requirepass: %s", got)
	}
	t.Setenv("ROTOR_TEST_REDIS_PW", "s3cret-wrong")
	withPW := "redis://:urlSecretPW@" + rd.Addr() + "/0"
	for _, tc := range []struct {
		name, url, env string
		hint, notHint  string
	}{
		{"variable", rd.URL(), "ROTOR_TEST_REDIS_PW", "check the variable redis_password_env names", "cluster.redis URL"},
		{"variable over the URL", withPW, "ROTOR_TEST_REDIS_PW", "check the variable redis_password_env names", "cluster.redis URL"},
		{"URL userinfo", withPW, "", "check the password in the cluster.redis URL", "variable redis_password_env names"},
		{"none", rd.URL(), "", "none is set: set redis_password_env, or a password in the cluster.redis URL", "check the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &syncBuf{}
			tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
			c, err := New(Config{Redis: tc.url, Instance: "a", RedisPasswordEnv: tc.env}, tr, zerolog.New(logs))
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			c.downEvery = 200 * time.Millisecond // a minute in production
			tr.SetFleet(c, c, c.RetryInterval())
			c.Start()
			const msg = "redis rejected this instance's password"
			waitUntil(t, 20*time.Second, "the warning repeated", func() bool { return len(warnings(logs, msg)) >= 3 })
			_ = c.Close()
			out := logs.String()
			w := warnings(logs, msg)[0]
			if !strings.Contains(w, tc.hint) || strings.Contains(w, tc.notHint) {
				t.Errorf("warning %s, want the hint %q", w, tc.hint)
			}
			if tc.env != "" && !strings.Contains(w, `"redis_password_env":"`+tc.env+`"`) {
				t.Errorf("warning %s does not name the variable %s", w, tc.env)
			}
			if strings.Contains(out, "s3cret") || strings.Contains(out, "urlSecretPW") {
				t.Errorf("a password in the log: %s", out)
			}
			if c.Connected() {
				t.Error("connected with a wrong password")
			}
		})
	}
}
