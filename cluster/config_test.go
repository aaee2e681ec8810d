package cluster

import (
	"errors"
	"strings"
	"testing"
)

// TestClusterConfigRedisScheme: the redis key takes only the documented
// redis:// and rediss:// URLs (bug: any URL go-redis parses, unix://
// socket URLs included, passed -check), and a negative database number is
// an error; neither error echoes the password.
func TestClusterConfigRedisScheme(t *testing.T) {
	for _, ok := range []string{"redis://127.0.0.1:6379/0", "rediss://:pw@h:6380/3", "REDIS://h", "redis://h/15"} {
		if err := (Config{Redis: ok}).Validate(); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"unix:///tmp/x.sock", "unix://:s3cret@/tmp/x.sock", "http://:s3cret@h:6379/0", "redis://:s3cret@h/-1"} {
		err := (Config{Redis: bad}).Validate()
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != "cluster.redis" {
			t.Errorf("%s: err %v, want a cluster.redis KeyError", bad, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: error echoes the password: %v", bad, err)
		}
	}
}

// TestClusterConfigDBWarning: a database number above 15 (which a Redis
// with the default "databases 16" rejects) is valid but warned about,
// without the password.
func TestClusterConfigDBWarning(t *testing.T) {
	c := Config{Redis: "redis://:s3cret@127.0.0.1:6379/99"}
	if err := c.Validate(); err != nil {
		t.Fatalf("db 99 rejected: %v", err)
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "database 99") || strings.Contains(w[0], "s3cret") {
		t.Errorf("warnings %q", w)
	}
	for _, quiet := range []Config{{}, {Redis: "redis://h/15"}, {Redis: "redis://h"}} {
		if w := quiet.Warnings(); len(w) != 0 {
			t.Errorf("%+v: warnings %q", quiet, w)
		}
	}
}

// TestClusterConfigRedisHostPort: a host:port go-redis would turn into an
// address that cannot work is an error naming the problem (bug:
// "redis://:pw@127.0.0.1:28379:0/0" passed -check, and rotor then looked
// up the host "127.0.0.1:28379"; a port 0 or past 65535 passed too); so is
// a password whose '/' or a stray '%' url.Parse would misread. No error
// echoes the password.
func TestClusterConfigRedisHostPort(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"redis://:s3cret@127.0.0.1:28379:0/0", `host:port "127.0.0.1:28379:0" does not parse: more than one ':'`},
		{"redis://127.0.0.1:28379:0", `host:port "127.0.0.1:28379:0" does not parse`},
		{"redis://:s3cret@::1:6379/0", `host:port "::1:6379" does not parse`},
		{"redis://:s3cret@127.0.0.1:99999/0", `port 99999 of "127.0.0.1:99999" is not 1-65535`},
		{"redis://:s3cret@127.0.0.1:0/0", `port 0 of "127.0.0.1:0" is not 1-65535`},
		{"rediss://:s3cret@[::1]:70000", `port 70000 of "[::1]:70000" is not 1-65535`},
		{"redis://:s3cret@h:99999999999999999999/0", `port 99999999999999999999 of`},
		{"redis://:s3cret@127.0.0.1:abc/0", `invalid port ":abc" after host`},
		{"redis://:s3cret@[::1/0", `missing ']' in host`},
		{"redis://:s3/cret@h:6379/0", `a '/', '?' or '#' in the password must be percent-encoded`},
		{"redis://:123/s3cret@h:6379/0", `a '/', '?' or '#' in the password must be percent-encoded`},
		{"redis://:s3cret#x@h:6379/0", `a '/', '?' or '#' in the password must be percent-encoded`},
		{"redis://:s3%zzcret@h:6379/0", `a '%' starts no escape`},
	} {
		t.Run(tc.url, func(t *testing.T) {
			err := (Config{Redis: tc.url}).Validate()
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != "cluster.redis" {
				t.Fatalf("err %v, want a cluster.redis KeyError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %q, want it to say %q", err, tc.want)
			}
			for _, secret := range []string{"s3cret", "s3", "cret", "zz", "123"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("err %q echoes the password (%q)", err, secret)
				}
			}
		})
	}
	for _, ok := range []string{
		"redis://:pw@[::1]:6379/0", "redis://[::1]", "rediss://h:65535", "redis://h:1/2",
		"redis://:p%2Fw@h:6379/0", "redis://:p@w@h:6379/0", "redis://:6379", "redis://",
		"redis://[fe80::1%25eth0]:6379",
	} {
		if err := (Config{Redis: ok}).Validate(); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}
