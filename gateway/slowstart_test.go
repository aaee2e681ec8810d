package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
)

// slowStartOf returns the admin API's slow_start of the upstream named
// name, which must be eligible.
func slowStartOf(t *testing.T, srv *Server, name string) bool {
	t.Helper()
	code, body := adminGet(t, srv, "/api/upstreams/"+name)
	var rec struct {
		State     string `json:"state"`
		SlowStart bool   `json:"slow_start"`
	}
	if err := json.Unmarshal([]byte(body), &rec); code != http.StatusOK || err != nil {
		t.Fatalf("GET /api/upstreams/%s: %d %s (%v)", name, code, body, err)
	}
	if rec.State != "eligible" {
		t.Fatalf("%s is %s, want eligible", name, rec.State)
	}
	return rec.SlowStart
}

// TestSlowStartNotOnFirstAdmission: on the built-in defaults (one direct
// upstream, no probe URL) the upstream serves at full rate as soon as
// rotor starts; bug: it ramped 4, 8, 16… tunnels/s (slow_start: true),
// so 40 concurrent requests right after start took seconds.
func TestSlowStartNotOnFirstAdmission(t *testing.T) {
	cfg := Defaults()
	cfg.Listen.SOCKS5, cfg.Listen.HTTP, cfg.Listen.Admin = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	srv, err := New(cfg, Options{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	waitState(t, srv, "direct", health.Eligible)
	if slowStartOf(t, srv, "direct") {
		t.Error("the direct upstream of the built-in defaults is in slow start right after rotor started")
	}
}

// TestSlowStartNotAfterRestart: an upstream eligible before a restart
// serves at full rate after it (it is probed first when a probe URL is
// set; here none is); one that was cooling ramps when re-admitted.
func TestSlowStartNotAfterRestart(t *testing.T) {
	dir := t.TempDir()
	dead := "127.0.0.1:1" // nothing listens: tunnels are never dialled here
	text := "state_file = " + strconvQuote(filepath.Join(dir, "rotor-state.json")) + "\n" +
		"allow_private_destinations = true\n[cooldown.refused]\nbase = \"1s\"\nmax = \"1s\"\n" +
		"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
		"[[upstream]]\nurl = \"socks5://" + dead + "\"\nname = \"cooling\"\n" +
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"127.0.0.1:0\"\n"

	a, _ := newGateway(t, "test.toml", text)
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	waitState(t, a, "direct", health.Eligible)
	waitState(t, a, "cooling", health.Eligible)
	a.pool.Report(a.pool.Lookup("cooling"), &health.Failure{Class: health.Refused, Stage: health.StageDial})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	b, _ := newGateway(t, "test.toml", text)
	serve(t, b)
	waitState(t, b, "direct", health.Eligible)
	if slowStartOf(t, b, "direct") {
		t.Error("an upstream eligible before the restart is in slow start after it")
	}
	waitState(t, b, "cooling", health.Eligible)
	if !snapOf(t, b, "cooling").SlowStart {
		// The ramp lasts 30 s from its re-admission, which waitState
		// has just seen: only a machine 30 s late could miss it here.
		t.Error("an upstream cooling before the restart did not ramp when re-admitted after it")
	}
}
