package upstream

import (
	"errors"
	"net/url"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// TestNewPasswordEndsAuthCooldown: a reload that changes only an
// upstream's password (same identity) ends a cooldown the old password
// caused: the record is probed at once with the new one. A cooldown for
// anything else, and an operator's disable, are left alone.
func TestNewPasswordEndsAuthCooldown(t *testing.T) {
	withPass := func(name, pass string, port int) Spec {
		s := spec(name, port)
		s.URL.User = url.UserPassword("scraper", pass)
		return s
	}
	tp := newTestPool(t, PoolConfig{}, nil, withPass("auth", "old", 1), withPass("refused", "old", 2), withPass("op", "old", 3))
	auth, refused, op := tp.Lookup("auth"), tp.Lookup("refused"), tp.Lookup("op")
	tp.Report(auth, &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth, Err: errors.New("407")})
	tp.Report(refused, &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("refused")})
	tp.tr.Disable(op.Record(), "bad exit IPs")

	// The same passwords again: nothing changes.
	if _, _, err := tp.Update([]Spec{withPass("auth", "old", 1), withPass("refused", "old", 2), withPass("op", "old", 3)}); err != nil {
		t.Fatal(err)
	}
	if st := tp.tr.Snapshot(auth.Record()).State; st != health.Cooling {
		t.Fatalf("auth after a reload without changes: %v, want cooling", st)
	}
	if _, _, err := tp.Update([]Spec{withPass("auth", "new", 1), withPass("refused", "new", 2), withPass("op", "new", 3)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		want health.State
	}{{"auth", health.ProbeAllowed}, {"refused", health.Cooling}, {"op", health.Disabled}} {
		s := tp.tr.Snapshot(tp.Lookup(c.name).Record())
		if s.State != c.want {
			t.Errorf("%s after a password change: %v (%s), want %v", c.name, s.State, s.Detail, c.want)
		}
	}
	if h := tp.tr.Snapshot(tp.Lookup("auth").Record()).History; len(h) == 0 || h[len(h)-1].Detail != "credentials changed in the config" {
		t.Errorf("auth history %+v", h)
	}
}
