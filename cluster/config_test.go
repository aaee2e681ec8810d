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
