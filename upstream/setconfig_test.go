package upstream

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"
)

// TestPoolSetConfig: a reloaded [pool] table applies to the next request
// (attempts, strategy), an invalid one changes nothing, and changed dial
// timeouts rebuild every endpoint's dialer at the next Update while the
// health record stays the same.
func TestPoolSetConfig(t *testing.T) {
	sp := specs("a", "b", "c")
	tp := newTestPool(t, PoolConfig{MaxAttempts: 3}, nil, sp...)
	for _, n := range []string{"a", "b", "c"} {
		tp.disable(t, n)
	}
	tp.tr.Enable(tp.Lookup("a").Record()) // probe_allowed: still not eligible

	if err := tp.SetConfig(PoolConfig{MaxAttempts: -1}); err == nil {
		t.Fatal("an invalid pool config was accepted")
	}
	if got := tp.Config().MaxAttempts; got != 3 {
		t.Fatalf("rejected config changed max_attempts to %d", got)
	}

	if err := tp.SetConfig(PoolConfig{MaxAttempts: 1, Strategy: "random", WaitForUpstream: 10 * time.Millisecond, ConnectTimeout: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if got := tp.Config(); got.MaxAttempts != 1 || got.Strategy != "random" {
		t.Fatalf("config after SetConfig = %+v", got)
	}
	a := tp.NewAttempts(Request{Addr: "example.com:80"})
	if _, err := a.Next(context.Background()); !errors.Is(err, ErrNoEligible) {
		t.Fatalf("Next with nothing eligible: %v, want ErrNoEligible after the new 10ms wait", err)
	}

	before := tp.Lookup("b")
	rec := before.Record()
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	after := tp.Lookup("b")
	if after == before {
		t.Error("changed connect timeout did not rebuild the endpoint's dialer")
	}
	if after.Record() != rec {
		t.Error("rebuilding the dialer replaced the health record")
	}
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	if tp.Lookup("b") != after {
		t.Error("an unchanged spec rebuilt its endpoint again")
	}
}

func TestRedactDirect(t *testing.T) {
	u, _ := url.Parse("direct://")
	if got := Redact(u); got != "direct://" {
		t.Fatalf("Redact(direct://) = %q", got)
	}
}
