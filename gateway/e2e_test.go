package gateway

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// waitState blocks until the named upstream is in state want, woken by the
// tracker's change channel (no sleeping), or fails after a generous bound.
func waitState(t *testing.T, srv *Server, name string, want health.State) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		ch := srv.Tracker().Changed()
		e := srv.Pool().Lookup(name)
		if e == nil {
			t.Fatalf("no upstream %q", name)
		}
		if got := srv.Tracker().Snapshot(e.Record()).State; got == want {
			return
		}
		select {
		case <-ch:
		case <-time.After(20 * time.Millisecond): // transitions into cooling do not signal Changed
		case <-deadline:
			t.Fatalf("upstream %s: state %v, want %v", name, srv.Tracker().Snapshot(e.Record()).State, want)
		}
	}
}

func probeConf(target *upstreamtest.Target) string {
	return fmt.Sprintf("[probe]\nurl = %q\nexpect_status = [200]\ntimeout = \"2s\"\n", target.URL("/ok"))
}

func TestFrontsReachTargetThroughEachUpstreamKind(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	kinds := []struct {
		name  string
		start func(t *testing.T) string // upstream URL
	}{
		{"socks5-noauth", func(t *testing.T) string { return upstreamtest.NewSOCKS5(t, upstreamtest.Options{}).URL().String() }},
		{"socks5-auth", func(t *testing.T) string {
			return upstreamtest.NewSOCKS5(t, upstreamtest.Options{Username: "u", Password: "p@ss"}).URL().String()
		}},
		{"http-basic", func(t *testing.T) string {
			return upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Username: "u", Password: "p"}).URL().String()
		}},
		{"direct", func(t *testing.T) string { return "direct://" }},
	}
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) {
			u := k.start(t)
			srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n%s\n[[upstream]]\nurl = %q\nname = \"up\"\n", probeConf(target), u))
			waitState(t, srv, "up", health.Eligible)
			fronts := []struct {
				name string
				get  func() (*http.Response, error)
			}{
				{"socks5", func() (*http.Response, error) { return socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok")) }},
				{"http-forward", func() (*http.Response, error) { return httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false) }},
				{"http-connect", func() (*http.Response, error) { return httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), true) }},
			}
			for _, f := range fronts {
				resp, err := f.get()
				if err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				if resp.StatusCode != 200 || bodyOf(resp) != "ok\n" {
					t.Fatalf("%s: status %d", f.name, resp.StatusCode)
				}
				if f.name != "socks5" && resp.Header.Get("X-Rotor-Upstream") != "up" {
					t.Errorf("%s: X-Rotor-Upstream = %q, want up", f.name, resp.Header.Get("X-Rotor-Upstream"))
				}
			}
		})
	}
}

func TestHTTPSUpstream(t *testing.T) {
	srv, target, _ := tlsUpstreamGateway(t, true)
	waitState(t, srv, "tls", health.Eligible)
	for _, tunnel := range []bool{false, true} {
		resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), tunnel)
		if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Rotor-Upstream") != "tls" {
			t.Fatalf("tunnel=%v: %v %v", tunnel, resp, err)
		}
	}
	if resp, err := socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok")); err != nil || resp.StatusCode != 200 {
		t.Fatalf("socks5 via https upstream: %v %v", resp, err)
	}
}

func TestDeadUpstreamIsSkippedWithoutClientFailures(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	dead := upstreamtest.ClosedPort(t)
	// start_eligible: both serve at once, so the dead one really is tried.
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"socks5://%s\"\nname = \"dead\"\n[[upstream]]\nurl = %q\nname = \"good\"\n",
		probeConf(target), dead, good.URL().String()))
	for i := 0; i < 50; i++ {
		front := []string{"socks5", "http", "connect"}[i%3]
		var resp *http.Response
		var err error
		switch front {
		case "socks5":
			resp, err = socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok"))
		case "http":
			resp, err = httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false)
		default:
			resp, err = httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), true)
		}
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d via %s failed: %v %v", i, front, err, resp)
		}
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("dead").Record())
	if snap.Failures[health.Refused] == 0 || snap.State == health.Eligible {
		t.Fatalf("dead upstream: failures %v state %v; want refused and not eligible", snap.Failures, snap.State)
	}
}

func TestAllDownFailsClearlyAfterWait(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	dead := upstreamtest.ClosedPort(t)
	wait := 300 * time.Millisecond
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nwait_for_upstream = %q\n[[upstream]]\nurl = \"socks5://%s\"\nname = \"dead\"\n",
		probeConf(target), wait.String(), dead))
	waitState(t, srv, "dead", health.Cooling)

	start := time.Now()
	if code := socksConnect(t, srv.Addr("socks5"), target.Addr()); code != repGeneralFailure {
		t.Errorf("SOCKS reply = %#x, want 0x01 general failure", code)
	}
	if el := time.Since(start); el < wait {
		t.Errorf("SOCKS failure after %v, before wait_for_upstream %v", el, wait)
	}
	for _, tunnel := range []bool{false, true} {
		resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), tunnel)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Rotor-Error") != "unavailable" {
			t.Errorf("tunnel=%v: %d %q, want 503 unavailable", tunnel, resp.StatusCode, resp.Header.Get("X-Rotor-Error"))
		}
		if !strings.Contains(bodyOf(resp), "wait_for_upstream") {
			t.Errorf("tunnel=%v: body does not explain the failure", tunnel)
		}
	}
}

func TestUpstreamReturningDuringWaitServesWaitingClient(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Refuse}})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nwait_for_upstream = \"20s\"\n[cooldown.refused]\nbase = \"200ms\"\nmax = \"200ms\"\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), up.URL().String()))
	waitState(t, srv, "up", health.Cooling)

	type result struct {
		resp *http.Response
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok"))
		done <- result{resp, err}
	}()
	for srv.Pool().Waiting() == 0 {
		select {
		case r := <-done:
			t.Fatalf("client finished before the upstream returned: %v %v", r.resp, r.err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	up.SetMode(upstreamtest.Mode{Fault: upstreamtest.Accept})
	r := <-done
	if r.err != nil || r.resp.StatusCode != 200 {
		t.Fatalf("waiting client: %v %v", r.resp, r.err)
	}
	if up.Tunnels() < 2 { // the probe, then the client
		t.Errorf("upstream tunnels = %d, want the probe and the client", up.Tunnels())
	}
}

func TestClientAuthOnBothFronts(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n%s\n[[client]]\nusername = \"scraper\"\npassword = \"s3cret\"\n[[upstream]]\nurl = \"direct://\"\nname = \"d\"\n", probeConf(target)))
	waitState(t, srv, "d", health.Eligible)
	url := target.URL("/ok")

	if _, err := socksGet(t, srv.Addr("socks5"), "", "", url); err == nil {
		t.Error("SOCKS5 without credentials succeeded")
	}
	if _, err := socksGet(t, srv.Addr("socks5"), "scraper", "wrong", url); err == nil {
		t.Error("SOCKS5 with a wrong password succeeded")
	}
	if resp, err := socksGet(t, srv.Addr("socks5"), "scraper", "s3cret", url); err != nil || resp.StatusCode != 200 {
		t.Errorf("SOCKS5 with credentials: %v %v", resp, err)
	}
	if resp, err := socksGet(t, srv.Addr("socks5"), "scraper-session-a1-tag-x", "s3cret", url); err == nil {
		t.Errorf("SOCKS5 with an unsatisfiable tag succeeded: %v", resp.StatusCode)
	}
	for _, tunnel := range []bool{false, true} {
		resp, err := httpGet(t, srv.Addr("http"), "", "", url, tunnel)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusProxyAuthRequired || resp.Header.Get("Proxy-Authenticate") == "" {
			t.Errorf("tunnel=%v without credentials: %d, want 407 with Proxy-Authenticate", tunnel, resp.StatusCode)
		}
		resp, err = httpGet(t, srv.Addr("http"), "scraper", "nope", url, tunnel)
		if err != nil || resp.StatusCode != http.StatusProxyAuthRequired {
			t.Errorf("tunnel=%v wrong password: %v %v, want 407", tunnel, resp, err)
		}
		resp, err = httpGet(t, srv.Addr("http"), "scraper-session-s1", "s3cret", url, tunnel)
		if err != nil || resp.StatusCode != 200 {
			t.Errorf("tunnel=%v with credentials: %v %v", tunnel, resp, err)
		}
	}
}

// TestUpstreamCAFile: an https:// upstream whose certificate a private CA
// signed is trusted through upstream_ca_file (it could only be through
// SSL_CERT_FILE for the whole process); without it the TLS failure is the
// upstream's (upstream_error at proxy_handshake), and a file that holds no
// certificate is a config error at its line.
func TestUpstreamCAFile(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{TLS: true})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), up.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.pem"), []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(ca string) string {
		return fmt.Sprintf("upstream_ca_file = %q\n%s\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"tls\"\n[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"\"\n",
			ca, probeConf(target), up.URL().String())
	}
	start := func(text string) *Server {
		t.Helper()
		p := filepath.Join(dir, "rotor.toml")
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := LoadConfig(p)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
		return srv
	}
	srv := start(conf("ca.pem")) // relative to the config file
	resp, err := socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok"))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("through the https upstream with its CA: %v %v", statusOf(resp), err)
	}

	srv = start(strings.Replace(conf(""), "upstream_ca_file = \"\"\n", "", 1))
	if resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), true); err == nil && resp.StatusCode == http.StatusOK {
		t.Fatal("an https upstream with an unknown CA was trusted")
	}
	if s := snapOf(t, srv, "tls"); s.State != health.Cooling || s.Reason != health.UpstreamError || s.Stage != health.StageProxyHandshake {
		t.Errorf("unknown CA: %v %v/%v, want cooling upstream_error/proxy_handshake", s.State, s.Reason, s.Stage)
	}

	_, err = ParseConfig(filepath.Join(dir, "x.toml"), []byte(conf(filepath.Join(dir, "bad.pem"))))
	if err == nil || !strings.Contains(err.Error(), "x.toml:1: upstream_ca_file:") || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("a CA file with no certificate: %v", err)
	}
}

// tlsUpstreamGateway starts a gateway whose one upstream, "tls", is an
// https:// proxy with credentials (trusted through Options.UpstreamTLS),
// probed through it at a target; with socks, the SOCKS5 front listens too.
func tlsUpstreamGateway(t *testing.T, socks bool) (*Server, *upstreamtest.Target, *upstreamtest.Server) {
	t.Helper()
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Username: "u", Password: "p", TLS: true})
	socksAddr := ""
	if socks {
		socksAddr = "127.0.0.1:0"
	}
	cfg, err := ParseConfig("t.toml", []byte(fmt.Sprintf("%s\n[[upstream]]\nurl = %q\nname = \"tls\"\n[listen]\nsocks5 = %q\nhttp = \"127.0.0.1:0\"\nadmin = \"\"\n",
		probeConf(target), up.URL().String(), socksAddr)))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, Options{UpstreamTLS: up.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	return srv, target, up
}
