package interop

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestShutdown: SIGTERM to rotor's PID stops accepting, lets open tunnels
// finish within shutdown_grace (1s here) and exits 0 (CONTRACT.md, CLI).
func TestShutdown(t *testing.T) {
	begin(t)
	tg := newTarget(t)
	u := startUpstream(t, "microsocks", srvOpts{})
	opts := rotorOpts{
		Upstreams: []rotorUpstream{{Name: "microsocks", URL: u.URL(u.Pass)}},
		ProbeURL:  tg.URL + probePath,
	}
	sigterm := func(t *testing.T, r *rotor) (time.Duration, error) {
		t.Helper()
		start := time.Now()
		if err := syscall.Kill(r.p.cmd.Process.Pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-r.p.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("rotor still running 10s after SIGTERM (shutdown_grace 1s)")
		}
		return time.Since(start), r.p.err
	}

	// A supervisor may stop rotor as soon as its ports accept.
	t.Run("sigterm_as_soon_as_listening", func(t *testing.T) {
		caseT(t)
		for i := range 10 {
			o := opts
			o.NoWait = true
			r := startRotor(t, o)
			if _, err := sigterm(t, r); err != nil {
				t.Errorf("run %d: SIGTERM right after the ports accepted: exit %v, want 0", i, err)
			}
		}
	})

	t.Run("sigterm_drains_open_tunnel", func(t *testing.T) {
		caseT(t)
		r := startRotor(t, opts)
		rep, c := socksConnect(r.SOCKS, []byte{0}, "", "", tg.Addr)
		if c == nil {
			t.Fatalf("CONNECT through rotor: %+v", rep)
		}
		defer c.Close()
		type result struct {
			d   time.Duration
			err error
		}
		done := make(chan result, 1)
		go func() {
			start := time.Now()
			_ = syscall.Kill(r.p.cmd.Process.Pid, syscall.SIGTERM)
			<-r.p.done
			done <- result{time.Since(start), r.p.err}
		}()
		time.Sleep(200 * time.Millisecond)
		// New clients are refused while the old tunnel still works.
		if nc, err := net.DialTimeout("tcp", r.SOCKS, time.Second); err == nil {
			nc.Close()
			t.Errorf("socks5 front still accepting 200ms after SIGTERM")
		}
		resp, body := getThrough(t, c, c, tg.Addr, "/drain")
		if resp.StatusCode != 200 || !strings.Contains(body, okBody(u.ExitIP)) {
			t.Errorf("open tunnel during the grace: %s %q", resp.Status, body)
		}
		res := <-done
		if res.err != nil {
			t.Errorf("exit after SIGTERM: %v, want 0", res.err)
		}
		if res.d > 4*time.Second {
			t.Errorf("exit took %v with shutdown_grace 1s", res.d)
		}
		t.Logf("rotor exited in %v", res.d.Round(time.Millisecond))
	})
}

// TestShutdownAdminAndSecondSignal runs the real binary with a long
// shutdown_grace:
//   - `rotor -healthcheck -config FILE` asks the running rotor, so it stays
//     healthy while FILE is invalid or names an admin address that needs a
//     restart;
//   - during the drain the admin listener stays up: /healthz answers 503
//     "shutting down" (the healthcheck fails), /metrics is scraped;
//   - a second SIGTERM ends the drain at once: the open tunnel is closed,
//     the state file written, and the exit code is 128+15;
//   - a positional argument is a usage error (exit 2), not a run on
//     built-in defaults.
func TestShutdownAdminAndSecondSignal(t *testing.T) {
	begin(t)
	bin := rotorBinary(t)
	dir := t.TempDir()
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { held.Close() })
	go func() { // owner: this test; ends when held is closed
		for {
			c, err := held.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	front, admin := hostPort(freePort(t)), hostPort(freePort(t))
	state := filepath.Join(dir, "state.json")
	conf := func(admin string) string {
		return fmt.Sprintf("shutdown_grace = \"30s\"\nstate_file = %q\nallow_private_destinations = true\n"+
			"[listen]\nsocks5 = \"\"\nhttp = %q\nadmin = %q\n[pool]\nstart_eligible = true\n"+
			"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n", state, front, admin)
	}
	path := filepath.Join(dir, "rotor.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path+".tmp", []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
	}
	write(conf(admin))
	p := startProc(t, "rotor", dir, bin, "-config", path, "-log-format", "console")
	waitAccept(t, p, admin, 10*time.Second)
	healthcheck := func(t *testing.T) error {
		t.Helper()
		_, stderr, err := run(t, 10*time.Second, nil, bin, "-healthcheck", "-config", path)
		if err != nil {
			return fmt.Errorf("%v: %s", err, stderr)
		}
		return nil
	}

	t.Run("positional_argument_is_usage_error", func(t *testing.T) {
		caseT(t)
		_, stderr, err := run(t, 10*time.Second, nil, bin, "check", "-config", path)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(stderr, `unexpected argument "check"`) {
			t.Errorf("rotor check -config FILE: %v %q, want exit 2 naming the argument", err, stderr)
		}
	})
	t.Run("healthcheck_asks_running_rotor", func(t *testing.T) {
		caseT(t)
		if err := healthcheck(t); err != nil {
			t.Fatalf("healthy rotor: %v", err)
		}
		write(conf(admin) + "bogus_key = 1\n")
		if err := healthcheck(t); err != nil {
			t.Errorf("config file invalid (rotor keeps the running config): %v", err)
		}
		write(conf(hostPort(freePort(t))))
		if err := healthcheck(t); err != nil {
			t.Errorf("listen.admin changed, not yet restarted: %v", err)
		}
	})

	t.Run("drain_keeps_admin_second_sigterm_ends_it", func(t *testing.T) {
		caseT(t)
		c, err := net.DialTimeout("tcp", front, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", held.Addr())
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT through rotor: %v %v", resp, err)
		}
		pid := p.cmd.Process.Pid
		start := time.Now()
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		hc := http.Client{Timeout: 5 * time.Second}
		for {
			resp, err := hc.Get("http://" + admin + "/healthz")
			if err != nil {
				t.Fatalf("admin listener unreachable during the drain: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusServiceUnavailable {
				if string(body) != "shutting down\n" {
					t.Errorf("/healthz during the drain: %q", body)
				}
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("/healthz still %d 10s after SIGTERM", resp.StatusCode)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if resp, err := hc.Get("http://" + admin + "/metrics"); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("/metrics during the drain: %v %v", resp, err)
		} else {
			resp.Body.Close()
		}
		if err := healthcheck(t); err == nil || !strings.Contains(err.Error(), "503") {
			t.Errorf("-healthcheck during the drain: %v, want a failure naming the 503", err)
		}
		if p.exited() {
			t.Fatalf("rotor exited with a tunnel open and 30s of grace: %v", p.waitErr())
		}

		// A signal within 100 ms of the first is taken for the same one
		// (GNU timeout sends a pair); this second one comes later.
		if d := 150*time.Millisecond - time.Since(start); d > 0 {
			time.Sleep(d)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Fatal("rotor still draining 10s after a second SIGTERM (shutdown_grace 30s)")
		}
		var ee *exec.ExitError
		if !errors.As(p.err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Errorf("exit after a second SIGTERM: %v, want exit status %d", p.err, 128+int(syscall.SIGTERM))
		}
		if !strings.Contains(p.tail(), "second signal") {
			t.Errorf("the second signal was not logged:\n%s", p.tail())
		}
		if _, err := os.Stat(state); err != nil {
			t.Errorf("state file after the cut-short drain: %v", err)
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var ne net.Error
		if _, err := io.ReadAll(c); errors.As(err, &ne) && ne.Timeout() {
			t.Error("the open tunnel outlived rotor")
		}
		waitRefused(t, admin, 2*time.Second)
		t.Logf("second SIGTERM: exited in %v", time.Since(start).Round(time.Millisecond))
	})
}
