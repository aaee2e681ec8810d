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
// password is said to be one, naming redis_password_env, and repeated
// while it lasts (bug: one "redis unreachable" warning, never again);
// neither password appears in the log.
func TestClusterWrongPasswordWarns(t *testing.T) {
	rd := clustertest.Start(t)
	if got := rd.Do("CONFIG", "SET", "requirepass", "s3cret-right"); got != "+OK" {
		t.Fatalf("CONFIG SET requirepass: %s", got)
	}
	t.Setenv("ROTOR_TEST_REDIS_PW", "s3cret-wrong")
	for _, env := range []string{"ROTOR_TEST_REDIS_PW", ""} {
		logs := &syncBuf{}
		tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
		c, err := New(Config{Redis: rd.URL(), Instance: "a", RedisPasswordEnv: env}, tr, zerolog.New(logs))
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
		if !strings.Contains(out, "redis_password_env") || strings.Contains(out, "s3cret") {
			t.Errorf("env %q: log %s", env, out)
		}
		if c.Connected() {
			t.Errorf("env %q: connected with a wrong password", env)
		}
	}
}
