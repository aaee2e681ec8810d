package upstream

import (
	"context"
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
	if h := tp.tr.Snapshot(tp.Lookup("auth").Record()).History; len(h) == 0 || h[len(h)-1].Detail != "credentials changed by a reload (config or upstream list file)" {
		t.Errorf("auth history %+v", h)
	}
}

// TestOldPasswordFailureAfterChangeOnlyCounts: a dial that started with
// the old password and fails auth_rejected after a reload changed it says
// nothing about the new password: it is counted, and the upstream keeps
// serving. It used to cool the upstream for the auth_rejected base, with
// nothing left to end that cooldown early (the change was already
// handled).
func TestOldPasswordFailureAfterChangeOnlyCounts(t *testing.T) {
	withPass := func(pass string) Spec {
		s := spec("dc-1", 1)
		s.URL.User = url.UserPassword("scraper", pass)
		return s
	}
	tp := newTestPool(t, PoolConfig{}, nil, withPass("old"))
	a := tp.NewAttempts(Request{Addr: "example.com:443"})
	e, err := a.Next(context.Background()) // dialing with the old password …
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tp.Update([]Spec{withPass("new")}); err != nil { // … when the reload lands
		t.Fatal(err)
	}
	rejected := &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth, Err: errors.New("username/password authentication failed")}
	if err := a.Failed(context.Background(), e, rejected); err != nil {
		t.Fatalf("Failed = %v, want another attempt allowed", err)
	}
	s := tp.tr.Snapshot(tp.Lookup("dc-1").Record())
	if s.State != health.Eligible {
		t.Errorf("after an old-password failure: %v (%v), want eligible", s.State, s.Reason)
	}
	if got := s.Failures[health.AuthRejected]; got != 1 {
		t.Errorf("auth_rejected failures = %d, want 1 (counted)", got)
	}

	// A failure with the password now in force still cools it.
	a = tp.NewAttempts(Request{Addr: "example.com:443"})
	if e, err = a.Next(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = a.Failed(context.Background(), e, rejected)
	if s := tp.tr.Snapshot(e.Record()); s.State != health.Cooling || s.Reason != health.AuthRejected {
		t.Errorf("after a new-password failure: %v (%v), want cooling for auth_rejected", s.State, s.Reason)
	}
}
