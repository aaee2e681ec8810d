package upstream

import (
	"context"
	"errors"
	"testing"

	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestSessionLateAnswerKeepsMove: a request picked on the session's
// upstream A whose answer arrives after the session moved to B (A failed
// for another request) leaves the session on B. Bug: the late answer
// rebound it to A unconditionally, so the session jumped back.
func TestSessionLateAnswerKeepsMove(t *testing.T) {
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, specs("a", "b", "c")...)
	req := Request{Addr: "example.com:443", Session: "m"}
	ctx := context.Background()
	next := func(a *Attempts) *Endpoint {
		t.Helper()
		e, err := a.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	a0 := tp.NewAttempts(req)
	home := next(a0)
	a0.Succeeded(home)
	a0.Release(home)

	r1 := tp.NewAttempts(req)
	if e := next(r1); e != home {
		t.Fatalf("R1 went to %s, want the session's %s", e.Name, home.Name)
	}
	r2 := tp.NewAttempts(req)
	if e := next(r2); e != home {
		t.Fatalf("R2 went to %s, want the session's %s", e.Name, home.Name)
	}
	refused := &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("connection refused")}
	if err := r2.Failed(ctx, home, refused); err != nil {
		t.Fatal(err)
	}
	moved := next(r2)
	if moved == home {
		t.Fatalf("R2's retry went to %s again", home.Name)
	}
	r2.Succeeded(moved)
	r2.Release(moved)
	if key := tp.SessionKey("m"); key != moved.Key {
		t.Fatalf("after the move the session is bound to %q, want %s", key, moved.Key)
	}
	r1.Succeeded(home) // R1's answer from A arrives late
	r1.Release(home)
	if key := tp.SessionKey("m"); key != moved.Key {
		t.Errorf("a late answer from %s rebound the session to %q, want it to stay on %s", home.Name, key, moved.Key)
	}
}
