package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
)

// TestForwardedAnswerRestartsBanStreak: a forwarded plain-HTTP answer
// that is no ban ends the streak of the host's expired ban (the site
// serves the exit again), so its next ban cools for the base again. The
// gateway reports it as served (Attempts.Served): a tunnel set up to the
// host no longer does that (a ban page comes through tunnels too), and a
// forwarded answer reported as a mere tunnel success would leave the
// streak growing.
func TestForwardedAnswerRestartsBanStreak(t *testing.T) {
	var status atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(target.Close)
	text := "allow_private_destinations = true\n[pool]\nstart_eligible = true\n[cooldown]\njitter = -1\n" +
		"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"
	cfg, err := ParseConfig("test.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	clk := healthtest.NewClock(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	logs := &logBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.String())
		}
	})
	srv, err := New(cfg, Options{Log: zerolog.New(logs), Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	proxy := &url.URL{Scheme: "http", Host: srv.Addr("http")}
	tp := &http.Transport{Proxy: http.ProxyURL(proxy), DisableKeepAlives: true}
	t.Cleanup(tp.CloseIdleConnections)
	client := &http.Client{Transport: tp, Timeout: 10 * time.Second}
	get := func(want int) {
		t.Helper()
		status.Store(int32(want))
		resp, err := client.Get(target.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	rec := srv.Pool().Lookup("direct").Record()
	// banFor returns how long the direct upstream cools for the target's
	// host, after a ban.
	banFor := func() time.Duration {
		t.Helper()
		get(http.StatusForbidden)
		s := srv.Tracker().Snapshot(rec)
		if len(s.Targets) != 1 || s.Targets[0].Reason != health.TargetHTTPError {
			t.Fatalf("per-host cooldowns %+v, want one ban", s.Targets)
		}
		return s.Targets[0].Until.Sub(clk.Now())
	}
	base := health.DefaultCooldowns().TargetHTTPError.Base
	if d := banFor(); d != base {
		t.Fatalf("first ban: %v, want %v", d, base)
	}
	clk.Advance(base)
	if d := banFor(); d != 2*base {
		t.Fatalf("a second ban right after the first ended: %v, want %v", d, 2*base)
	}
	clk.Advance(2 * base)
	get(http.StatusOK) // the site serves this exit again
	if d := banFor(); d != base {
		t.Errorf("a ban after the site served again: %v, want the base %v", d, base)
	}
}
