package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoTarget is a TCP echo server on loopback for tunnels through rotor;
// it stops when the test ends.
func echoTarget(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() { // owner: the test; ends when ln is closed at cleanup
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(c, c); c.Close() }() // ends when rotor or the client closes
		}
	}()
	return ln.Addr().String()
}

// drainConf is a config on loopback ports rotor picks, with a long
// shutdown_grace, serving target's loopback address through direct://.
func drainConf(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	return writeFile(t, dir, "rotor.toml", "shutdown_grace = \"1m\"\nallow_private_destinations = true\n"+
		"[listen]\nsocks5 = \"\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n")
}

// openTunnel opens a CONNECT tunnel through the HTTP front to target and
// checks that it echoes.
func openTunnel(t *testing.T, front, target string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if br.Buffered() > 0 {
		t.Fatalf("%d bytes after the CONNECT answer", br.Buffered())
	}
	echoes(t, c, "before")
	return c
}

// echoes sends word through the tunnel c and fails unless it comes back.
func echoes(t *testing.T, c net.Conn, word string) {
	t.Helper()
	if _, err := io.WriteString(c, word); err != nil {
		t.Fatalf("tunnel write %q: %v", word, err)
	}
	buf := make([]byte, len(word))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != word {
		t.Fatalf("tunnel echo of %q: %q %v", word, buf, err)
	}
}

// TestDrainIgnoresRepeatedSignal: two SIGTERMs back to back (GNU timeout
// signals the process, then its group) are one request to drain: the
// open tunnel keeps working, and when it ends rotor exits 0 (bug: the
// second ended the drain at once, exit 143). The signals reach run's
// channel together, as the signal package delivers them. A SIGHUP during
// the drain reloads nothing and says so (bug: it was dropped without a
// line, and an operator who edited the config during a drain saw nothing
// happen).
func TestDrainIgnoresRepeatedSignal(t *testing.T) {
	for _, tc := range []struct {
		second os.Signal
		line   string
	}{
		{syscall.SIGTERM, "signal repeated at once: ignored"},
		{syscall.SIGHUP, "reload ignored: rotor is draining"},
	} {
		t.Run(tc.second.String(), func(t *testing.T) {
			t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
			// Both signals are sent at once; under load the second can be
			// read more than 100 ms after the first (a CI flake).
			old := repeatWindow
			repeatWindow = time.Minute
			t.Cleanup(func() { repeatWindow = old })
			target := echoTarget(t)
			s := serve(t, "-config", drainConf(t))
			c := openTunnel(t, s.listening(t, "http"), target)
			s.sig <- syscall.SIGTERM
			s.sig <- tc.second
			echoes(t, c, "draining")
			c.Close()
			if code := s.waitExit(t, 20*time.Second); code != 0 {
				t.Errorf("exit %d after a drained tunnel, want 0", code)
			}
			if !strings.Contains(s.stderr.String(), tc.line) {
				t.Errorf("no %q line:\n%s", tc.line, s.stderr.String())
			}
		})
	}
}

// TestDrainIgnoresRepeatedSignalBinary is TestDrainIgnoresRepeatedSignal
// on the real binary with real signals: kill(2) twice in a row.
func TestDrainIgnoresRepeatedSignalBinary(t *testing.T) {
	bin := buildRotor(t)
	target := echoTarget(t)
	stderr := &lockedBuffer{}
	cmd := exec.Command(bin, "-config", drainConf(t))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan int, 1)
	go func() { // owner: the test; ends when the rotor process does
		_ = cmd.Wait()
		exited <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("rotor stderr:\n%s", stderr)
		}
	})
	front := ""
	for deadline := time.Now().Add(20 * time.Second); front == "" && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		sc := bufio.NewScanner(strings.NewReader(stderr.String()))
		for sc.Scan() {
			var line struct{ Message, Listener, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Message == "listening" && line.Listener == "http" {
				front = line.Addr
			}
		}
		select {
		case code := <-exited:
			t.Fatalf("rotor exited %d before listening", code)
		default:
		}
	}
	if front == "" {
		t.Fatal("no http listener logged within 20s")
	}
	c := openTunnel(t, front, target)
	for range 2 {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	echoes(t, c, "draining")
	c.Close()
	select {
	case code := <-exited:
		exited <- code // for cleanup
		if code != 0 {
			t.Errorf("exit %d after a drained tunnel, want 0", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rotor still running 30s after its last tunnel closed")
	}
}
