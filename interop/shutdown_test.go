package interop

import (
	"net"
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
