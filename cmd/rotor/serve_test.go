package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lockedBuffer is an io.Writer the test can read while rotor writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// served is a run of rotor in this process; signals go to it through
// the channel its notifyFunc captured, not to the test process.
type served struct {
	stderr *lockedBuffer
	sigs   chan chan<- os.Signal
	sig    chan<- os.Signal
	code   chan int
}

// serve runs rotor with args until it returns; the test ends it with a
// SIGTERM if it still runs at cleanup.
func serve(t *testing.T, args ...string) *served {
	t.Helper()
	s := &served{stderr: &lockedBuffer{}, sigs: make(chan chan<- os.Signal, 1), code: make(chan int, 1)}
	notify := func(c chan<- os.Signal, _ ...os.Signal) { s.sigs <- c }
	go func() { s.code <- run(args, io.Discard, s.stderr, notify) }()
	t.Cleanup(func() {
		if s.sig != nil {
			select {
			case s.sig <- syscall.SIGTERM:
			default:
			}
		}
		select {
		case <-s.code:
		case <-time.After(30 * time.Second):
			t.Error("rotor still running 30s after cleanup's SIGTERM")
		}
		if t.Failed() {
			t.Logf("rotor stderr:\n%s", s.stderr)
		}
	})
	return s
}

// listening waits for rotor's "listening" log line for front and returns
// its address. It fails when run returns first.
func (s *served) listening(t *testing.T, front string) string {
	t.Helper()
	if s.sig == nil {
		select {
		case s.sig = <-s.sigs:
		case code := <-s.code:
			t.Fatalf("rotor exited %d before catching signals", code)
		case <-time.After(10 * time.Second):
			t.Fatal("rotor did not catch signals within 10s")
		}
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(s.stderr.String()))
		for sc.Scan() {
			var line struct{ Message, Listener, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "listening" && line.Listener == front {
				return line.Addr
			}
		}
	}
	t.Fatalf("no %q listener logged within 10s", front)
	return ""
}

// waitExit returns run's exit code, failing after within.
func (s *served) waitExit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case code := <-s.code:
		s.code <- code // for cleanup
		return code
	case <-time.After(within):
		t.Fatalf("rotor still running after %v", within)
		return 0
	}
}

// writeFile writes text to dir/name the way editors do (temp + rename).
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p+".tmp", []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		t.Fatal(err)
	}
	return p
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func get(t *testing.T, rawURL string) (int, string, error) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(rawURL)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestPositionalArgumentsAreErrors: parsing stops at the first non-flag, so
// `rotor check -config a.toml` served on built-in defaults, and a trailing
// word after -check was dropped. Any positional argument is a usage error.
func TestPositionalArgumentsAreErrors(t *testing.T) {
	dir := t.TempDir()
	good := writeFile(t, dir, "a.toml", "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[[upstream]]\nurl = \"direct://\"\n")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"subcommand style", []string{"check", "-config", good}, `unexpected argument "check" (did you mean -check?)`},
		{"trailing word after -check", []string{"-config", good, "-check", "extra"}, `unexpected argument "extra"`},
		{"trailing word alone", []string{"-config", good, "extra"}, `unexpected argument "extra"`},
		{"after -version", []string{"-version", "x"}, `unexpected argument "x"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := serve(t, tc.args...)
			code := s.waitExit(t, 10*time.Second)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			errs := s.stderr.String()
			if !strings.Contains(errs, tc.want) || !strings.Contains(errs, "Usage: rotor") {
				t.Errorf("stderr lacks %q and the usage:\n%s", tc.want, errs)
			}
		})
	}
}

func TestHelpExitsZero(t *testing.T) {
	for _, arg := range []string{"-h", "-help", "--help"} {
		t.Run(arg, func(t *testing.T) {
			code, out, errs := runCmd(t, arg)
			if code != 0 {
				t.Errorf("exit %d, want 0", code)
			}
			if !strings.Contains(out, "Usage: rotor") || !strings.Contains(out, "-config") || errs != "" {
				t.Errorf("usage belongs on stdout: stdout %q stderr %q", out, errs)
			}
		})
	}
	code, _, errs := runCmd(t, "-no-such-flag")
	if code != 2 || !strings.Contains(errs, "-no-such-flag") || !strings.Contains(errs, "Usage: rotor") {
		t.Errorf("unknown flag: exit %d %q, want 2 and the usage on stderr", code, errs)
	}
}

// TestHealthcheckAsksRunningRotor: `rotor -healthcheck -config FILE` read
// FILE, so a bad edit (rejected by the running rotor) or a listen.admin
// change waiting for a restart made a healthy container unhealthy.
func TestHealthcheckAsksRunningRotor(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	dir := t.TempDir()
	admin := freeAddr(t)
	base := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = %q\n[[upstream]]\nurl = \"direct://\"\n"
	path := writeFile(t, dir, "rotor.toml", fmt.Sprintf(base, admin))
	s := serve(t, "-config", path)
	if got := s.listening(t, "admin"); got != admin {
		t.Fatalf("admin on %s, want %s", got, admin)
	}
	healthcheck := func(t *testing.T, want int) {
		t.Helper()
		if code, _, errs := runCmd(t, "-healthcheck", "-config", path); code != want {
			t.Errorf("-healthcheck: exit %d, want %d (%s)", code, want, errs)
		}
	}
	healthcheck(t, 0)

	t.Run("file invalid", func(t *testing.T) {
		writeFile(t, dir, "rotor.toml", fmt.Sprintf(base, admin)+"bogus_key = 1\n")
		healthcheck(t, 0)
	})
	t.Run("listen.admin changed, not restarted", func(t *testing.T) {
		writeFile(t, dir, "rotor.toml", fmt.Sprintf(base, freeAddr(t)))
		healthcheck(t, 0)
	})
	t.Run("not running", func(t *testing.T) {
		s.sig <- syscall.SIGTERM
		if code := s.waitExit(t, 10*time.Second); code != 0 {
			t.Fatalf("SIGTERM: exit %d, want 0", code)
		}
		// The record is gone with the process: the file's listen.admin is asked.
		healthcheck(t, 1)
	})
}

// TestDrainKeepsAdminAndSecondSignalEndsIt: during the drain the admin
// listener stays up (/healthz 503 "shutting down", /metrics scraped); a
// second signal ends the drain at once, writes the state file and exits
// 128+signal.
func TestDrainKeepsAdminAndSecondSignalEndsIt(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	target, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	t.Cleanup(func() { target.Close(); held.Wait() })
	held.Add(1)
	go func() { // holds every accepted conn open until rotor closes it
		defer held.Done()
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			held.Add(1)
			go func() { defer held.Done(); _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	dir := t.TempDir()
	state := filepath.Join(dir, "state.json")
	path := writeFile(t, dir, "rotor.toml", fmt.Sprintf("shutdown_grace = \"1m\"\nstate_file = %q\nallow_private_destinations = true\n"+
		"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n", state))
	s := serve(t, "-config", path)
	front, admin := s.listening(t, "http"), s.listening(t, "admin")

	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", target.Addr())
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}

	start := time.Now()
	var draining time.Time
	s.sig <- syscall.SIGTERM
	for {
		code, body, err := get(t, "http://"+admin+"/healthz")
		if err != nil {
			t.Fatalf("admin listener unreachable during the drain: %v", err)
		}
		if code == http.StatusServiceUnavailable {
			draining = time.Now() // after rotor took the SIGTERM
			if body != "shutting down\n" {
				t.Errorf("/healthz during the drain: %q, want \"shutting down\"", body)
			}
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("/healthz still %d 10s after SIGTERM", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, body, err := get(t, "http://"+admin+"/metrics"); err != nil || code != http.StatusOK || !strings.Contains(body, "rotor_tunnels_active") {
		t.Errorf("/metrics during the drain: %d %v", code, err)
	}
	if code, _, errs := runCmd(t, "-healthcheck", "-config", path); code != 1 || !strings.Contains(errs, "503") {
		t.Errorf("-healthcheck during the drain: exit %d %q, want 1 and the 503", code, errs)
	}
	select {
	case code := <-s.code:
		t.Fatalf("rotor exited %d with a tunnel open and 1m of grace left", code)
	default:
	}

	// One within repeatWindow of the first is the same request, ignored
	// (TestDrainIgnoresRepeatedSignal); this one is a second.
	time.Sleep(time.Until(draining.Add(repeatWindow)))
	s.sig <- syscall.SIGINT
	if code := s.waitExit(t, 10*time.Second); code != 128+int(syscall.SIGINT) {
		t.Errorf("exit %d after a second signal, want %d", code, 128+int(syscall.SIGINT))
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("drain took %v after the second signal", d)
	}
	if !strings.Contains(s.stderr.String(), "second signal: ending the drain now") {
		t.Error("the second signal was not logged")
	}
	if _, err := os.Stat(state); err != nil {
		t.Errorf("state file after a cut-short drain: %v", err)
	}
	if _, _, err := get(t, "http://"+admin+"/healthz"); err == nil {
		t.Error("admin listener still up after exit")
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ne net.Error
	if _, err := io.ReadAll(c); errors.As(err, &ne) && ne.Timeout() {
		t.Error("the open tunnel was not closed by the cut-short drain")
	}
}
