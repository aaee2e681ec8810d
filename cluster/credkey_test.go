package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// hmac8 is HMAC-SHA256 of the parts (NUL-separated) keyed with key, 8
// bytes in hex: the test's own statement of the fingerprint.
func hmac8(key []byte, parts ...string) string {
	m := hmac.New(sha256.New, key)
	for i, p := range parts {
		if i > 0 {
			m.Write([]byte{0})
		}
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// TestClusterCredFingerprintKeyedWithFleetSecret: the credential
// fingerprint stored with an auth_rejected record is keyed with a secret
// of the fleet: the Redis password when there is one (nothing stored),
// else a random key stored once under "<prefix>:credkey", the same on
// every instance. Bug: it was keyed with the upstream's identity, which a
// reader of Redis knows, so the password could be guessed offline.
func TestClusterCredFingerprintKeyedWithFleetSecret(t *testing.T) {
	identityKeyed := func(pw string) string { // the old scheme
		m := hmac.New(sha256.New, []byte("k"))
		m.Write([]byte(pw))
		return hex.EncodeToString(m.Sum(nil)[:8])
	}
	for _, tc := range []struct {
		name, redisPW string
	}{
		{"random key stored in redis", ""},
		{"key from the redis password", "fleet-redis-pw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd := clustertest.Start(t)
			url := rd.URL()
			if tc.redisPW != "" {
				if got := rd.Do("CONFIG", "SET", "requirepass", tc.redisPW); got != "+OK" {
					t.Fatalf("CONFIG SET requirepass: %s", got)
				}
				url = "redis://:" + tc.redisPW + "@" + rd.Addr() + "/0"
			}
			member := func(inst, pw string) (*Cluster, *health.Tracker) {
				tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
				c, err := New(Config{Redis: url, Instance: inst}, tr, zerolog.Nop())
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				c.SetCredentials(map[string]string{"k": pw})
				tr.SetFleet(c, c, c.RetryInterval())
				tr.Add("k", "up", nil, false)
				c.Start()
				t.Cleanup(func() { _ = c.Close() })
				waitUntil(t, 5*time.Second, inst+" connected", c.Connected)
				return c, tr
			}
			y, _ := member("y", "old-secret")
			_, trZ := member("z", "old-secret")
			_, trX := member("x", "new-secret")
			ctx := context.Background()
			waitUntil(t, 5*time.Second, "three subscribers", func() bool {
				n, err := y.rdb.PubSubNumSub(ctx, "rotor:events").Result()
				return err == nil && n["rotor:events"] >= 3
			})
			y.Publish(authRejected(time.Now()))
			var rec record
			waitUntil(t, 3*time.Second, "y's failure stored", func() bool {
				raw, err := y.rdb.Get(ctx, "rotor:rec:k").Result()
				if err != nil {
					return false
				}
				rec, err = decodeRecord(raw)
				return err == nil && rec.State == "cooling"
			})
			stored, err := y.rdb.Get(ctx, "rotor:credkey").Result()
			var key []byte
			if tc.redisPW == "" {
				if err != nil || len(stored) != 64 {
					t.Fatalf("stored fleet key %d chars, err %v; want 64 hex", len(stored), err)
				}
				key = []byte(stored)
			} else {
				if err == nil {
					t.Fatalf("a fleet key stored although the redis password keys the fingerprint")
				}
				m := hmac.New(sha256.New, []byte(tc.redisPW))
				m.Write([]byte("rotor fleet credential fingerprint key v1"))
				key = m.Sum(nil)
			}
			if rec.Cred == identityKeyed("old-secret") {
				t.Errorf("fingerprint %q is keyed with the identity only", rec.Cred)
			}
			if want := hmac8(key, "k", "old-secret"); rec.Cred != want {
				t.Errorf("fingerprint %q, want %q (keyed with the fleet secret)", rec.Cred, want)
			}
			// The instances agree on the key: z (same password) takes the
			// failure, x (another) does not.
			waitUntil(t, 3*time.Second, "z takes y's failure", func() bool { return stateOf(trZ) == health.Cooling })
			if s := stateOf(trX); s != health.Eligible {
				t.Errorf("x (other password): %v, want eligible", s)
			}
		})
	}
}
