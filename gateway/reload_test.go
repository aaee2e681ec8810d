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

// eventuallyTrue polls cond for up to 10s (file-watch reloads are
// asynchronous and have no channel to wait on).
func eventuallyTrue(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func TestReloadKeepsStateOfUnchangedUpstreams(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	a := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	c := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	d := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	dead := upstreamtest.ClosedPort(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.toml")
	listFile := filepath.Join(dir, "proxies.txt")
	head := fmt.Sprintf("[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"\"\n%s\n", probeConf(target))
	write := func(p, text string) {
		t.Helper()
		// Write a temp file and rename it over, as editors do.
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	write(listFile, "# seller list\n")
	write(path, head+fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"a\"\n[[upstream]]\nurl = \"socks5://%s\"\nname = \"b\"\n[[upstream_file]]\npath = \"proxies.txt\"\nscheme = \"socks5\"\n", a.URL().String(), dead))

	srv, logs, hup := watchedFile(t, path, true)
	waitState(t, srv, "a", health.Eligible)
	waitState(t, srv, "b", health.Cooling)
	before := srv.Tracker().Snapshot(srv.Pool().Lookup("a").Record())

	// 1. SIGHUP: a changes tags only (same identity), b is removed, c added.
	write(path, head+fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"a\"\ntags = [\"us\"]\n[[upstream]]\nurl = %q\nname = \"c\"\n[[upstream_file]]\npath = \"proxies.txt\"\nscheme = \"socks5\"\n", a.URL().String(), c.URL().String()))
	hup <- os.Interrupt
	eventuallyTrue(t, "c added by SIGHUP", func() bool { return srv.Pool().Lookup("c") != nil })
	if srv.Pool().Lookup("b") != nil {
		t.Error("b still in the pool after its removal")
	}
	after := srv.Tracker().Snapshot(srv.Pool().Lookup("a").Record())
	if after.State != health.Eligible || len(after.History) < len(before.History) || after.Successes < before.Successes {
		t.Errorf("a lost its record across the reload: before %+v after %+v", before, after)
	}
	if got := srv.Pool().Lookup("a").Tags; len(got) != 1 || got[0] != "us" {
		t.Errorf("a's tags = %v, want the new [us]", got)
	}
	if !strings.Contains(logs.String(), `"upstream":"b"`) || !strings.Contains(logs.String(), "operator") {
		t.Error("removing b was not logged as an operator action")
	}

	// 2. A list-file edit alone (no signal) adds d.
	write(listFile, "# seller list\n"+strings.TrimPrefix(d.Addr(), "")+"\nthis is not a proxy line\n")
	eventuallyTrue(t, "d added from the list file", func() bool { return srv.Pool().Lookup(d.Addr()) != nil })
	if !strings.Contains(logs.String(), "proxies.txt:3") {
		t.Error("the bad list line was not reported with FILE:LINE")
	}

	// 3. An invalid edit is rejected; the running config keeps serving.
	write(path, head+"[[upstream]]\nurl = \"socks5://x\"\nbogus_key = 1\n")
	eventuallyTrue(t, "the rejected reload logged", func() bool {
		return strings.Contains(logs.String(), "reload rejected") && strings.Contains(logs.String(), "rotor.toml:")
	})
	if srv.Pool().Lookup("a") == nil || srv.Pool().Lookup("c") == nil {
		t.Fatal("a rejected reload changed the pool")
	}
	resp, err := socksGet(t, srv.Addr("socks5"), "", "", target.URL("/ok"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a rejected reload the old config must still serve: %v %v", resp, err)
	}
}

// TestReloadStateFileNeedsRestart: a changed state_file was silently
// ignored on reload. Like listener addresses and [cluster] it is reported
// as taking effect after a restart; until then the records keep going to
// the file rotor restored from.
func TestReloadStateFileNeedsRestart(t *testing.T) {
	dir := t.TempDir()
	conf := func(state string) string {
		return fmt.Sprintf("state_file = %q\n[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n", state)
	}
	oldPath, newPath := filepath.Join(dir, "old.json"), filepath.Join(dir, "new.json")
	srv, logs := newGateway(t, "state.toml", conf(oldPath))
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	next, err := ParseConfig("state.toml", []byte(conf(newPath)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(next); err != nil {
		t.Fatal(err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "state_file changed") {
			line = l
		}
	}
	if !strings.Contains(line, "takes effect after a restart") || !strings.Contains(line, `"from":"`+oldPath) || !strings.Contains(line, `"to":"`+newPath) {
		t.Errorf("state_file change logged as %q, want a restart notice with from and to", line)
	}
	if _, err := os.Stat(oldPath); err != nil {
		t.Errorf("records not written to the running state file: %v", err)
	}
	if _, err := os.Stat(newPath); err == nil {
		t.Error("records written to the new state file before a restart")
	}
}

// TestReloadConnectionLimitsNeedRestart: connection caps are built with
// the server; a reload that changes them says they wait for a restart
// instead of ignoring them silently.
func TestReloadConnectionLimitsNeedRestart(t *testing.T) {
	conf := func(max int) string {
		return fmt.Sprintf("[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\nmax_connections = %d\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n", max)
	}
	srv, logs := newGateway(t, "limits.toml", conf(100))
	for _, max := range []int{100, 200} {
		next, err := ParseConfig("limits.toml", []byte(conf(max)))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Reload(next); err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(logs.String(), "max_connections_per_ip changed"); got != max/100-1 {
			t.Errorf("after a reload to max_connections = %d: %d restart notices, want %d", max, got, max/100-1)
		}
	}
}

// TestReloadAllowPrivateDestinations: allow_private_destinations was read
// once, when the direct dialer was built, and a reload left it as it was
// in both directions (only "config reloaded" was logged). Tightening it
// live is what an operator does: it now holds for the next tunnel, and
// loosening it applies too.
func TestReloadAllowPrivateDestinations(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	conf := func(allow bool) string {
		return fmt.Sprintf("allow_private_destinations = %t\n[pool]\nstart_eligible = true\n[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n"+
			"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n", allow)
	}
	for _, start := range []bool{true, false} {
		t.Run(fmt.Sprintf("from %t", start), func(t *testing.T) {
			srv, _ := startGateway(t, conf(start))
			for _, allow := range []bool{start, !start, start} {
				next, err := ParseConfig("test.toml", []byte(conf(allow)))
				if err != nil {
					t.Fatal(err)
				}
				if err := srv.Reload(next); err != nil {
					t.Fatal(err)
				}
				want := byte(repSuccess)
				if !allow {
					want = repNotAllowed // the direct upstream refuses 127.0.0.1
				}
				if got := socksConnect(t, srv.Addr("socks5"), target.Addr()); got != want {
					t.Errorf("allow_private_destinations = %t after a reload: SOCKS5 reply %#x to %s, want %#x", allow, got, target.Addr(), want)
				}
			}
		})
	}
}

// TestReloadAllowPrivateClosesKeptAlive: a reload to
// allow_private_destinations = false also ends plain-HTTP forwarding
// through a direct connection kept alive from before (it was checked only
// at the dial, so the pooled connection to the private target served on).
func TestReloadAllowPrivateClosesKeptAlive(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	conf := func(allow bool) string {
		return fmt.Sprintf("allow_private_destinations = %t\n[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"0s\"\n"+
			"[listen]\nsocks5 = \"\"\nhttp = \"127.0.0.1:0\"\nadmin = \"\"\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n", allow)
	}
	for _, method := range []string{http.MethodGet, http.MethodPost} {
		t.Run(method, func(t *testing.T) {
			srv, _ := startGateway(t, conf(true))
			if resp, _, err := askForward(t, srv, method, target.URL("/")); err != nil || resp.StatusCode != 200 {
				t.Fatalf("before the reload: %s %v", statusOf(resp), err)
			}
			next, err := ParseConfig("test.toml", []byte(conf(false)))
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Reload(next); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if resp, _, err := askForward(t, srv, method, target.URL("/")); err == nil && resp.StatusCode == 200 {
					t.Fatalf("after the reload to false: %s through a kept-alive connection to %s", resp.Status, target.Addr())
				}
			}
		})
	}
}
