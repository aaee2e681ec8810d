package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// buildRotor builds the rotor binary into a temporary directory.
func buildRotor(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "rotor")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// logPipe is an os.Pipe for rotor's stderr; both ends close at cleanup.
func logPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// readListening reads rotor's log lines from r until every front in
// fronts has logged "listening", and returns their addresses. It reads
// no further: what rotor logs next stays in the pipe.
func readListening(t *testing.T, r *os.File, fronts ...string) map[string]string {
	t.Helper()
	_ = r.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer r.SetReadDeadline(time.Time{})
	addrs := map[string]string{}
	br := bufio.NewReader(r)
	for len(addrs) < len(fronts) {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("reading rotor's log for %v: %v (found %v)", fronts, err, addrs)
		}
		var l struct{ Message, Listener, Addr string }
		if json.Unmarshal(line, &l) == nil && l.Message == "listening" {
			for _, f := range fronts {
				if l.Listener == f {
					addrs[f] = l.Addr
				}
			}
		}
	}
	return addrs
}

// closedTunnel runs one tunnel through front to the echo server target
// and waits for rotor to close it after the client half-closed: rotor
// logs the tunnel's line on the way, which must not wait for stderr.
func closedTunnel(front, target string) error {
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\nping", target)
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil || status[:12] != "HTTP/1.1 200" {
		return fmt.Errorf("CONNECT: %q %v", status, err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return fmt.Errorf("CONNECT header: %v", err)
		}
		if l == "\r\n" {
			break
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(br)
	if err != nil || string(got) != "ping" {
		return fmt.Errorf("tunnel echoed %q, %v; want ping, then rotor's close", got, err)
	}
	return nil
}

// refusedConnect asks front for a tunnel to addr, where nothing listens,
// and returns the status line of rotor's answer.
func refusedConnect(front, addr string) (string, error) {
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", addr)
	return bufio.NewReader(c).ReadString('\n')
}

// TestUnreadStderrDoesNotStallTunnels: rotor's stderr is a pipe nobody
// reads (a stalled docker logs driver). Bug: once the pipe was full, each
// connection's goroutine blocked writing its line before it closed its
// client (sockets piled up in CLOSE-WAIT) or sent a failed request its
// 502, which then never came. Every tunnel must end, every failed request
// be answered, and a SIGTERM still drain and exit 0 (the log flush at
// exit gives up on the pipe).
func TestUnreadStderrDoesNotStallTunnels(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	pr, pw := logPipe(t)
	target := echoTarget(t)
	sigs := make(chan chan<- os.Signal, 1)
	code := make(chan int, 1)
	conf := drainConf(t)
	go func() { // owner: the test; ends at the SIGTERM below
		code <- run([]string{"-config", conf}, io.Discard, pw, func(c chan<- os.Signal, _ ...os.Signal) { sigs <- c })
	}()
	front := readListening(t, pr, "http")["http"]
	sig := <-sigs

	// ~300 bytes a line: 600 lines are well past the pipe's 64 KiB.
	const workers, each = 6, 100
	errs := make(chan error, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() { // owner: the test; ends after its tunnels
			defer wg.Done()
			for range each {
				errs <- closedTunnel(front, target)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := 0
	for err := range errs {
		if err != nil {
			if failed == 0 {
				t.Errorf("tunnel with an unread stderr: %v", err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d tunnels failed", failed, workers*each)
	}
	closed := freeAddr(t)
	for range 3 {
		if status, err := refusedConnect(front, closed); err != nil || !strings.HasPrefix(status, "HTTP/1.1 5") {
			t.Fatalf("CONNECT to a closed port with an unread stderr: %q %v, want a 5xx answer", status, err)
		}
	}
	sig <- syscall.SIGTERM
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit %d with an unread stderr, want 0", c)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rotor still running 30s after SIGTERM with an unread stderr")
	}
}

var droppedMetric = regexp.MustCompile(`(?m)^rotor_log_lines_dropped_total (\d+)$`)

// TestClosedStderrPipeBinary: rotor's stderr is a pipe that closes after
// the first lines (`rotor 2> >(head -c 300 >/dev/null)`). Bug: the next
// log write killed rotor with SIGPIPE (exit 141: no drain, no state
// file). It must keep serving, count the lost lines in
// rotor_log_lines_dropped_total, and drain and exit 0 on SIGTERM.
func TestClosedStderrPipeBinary(t *testing.T) {
	bin := buildRotor(t)
	target := echoTarget(t)
	pr, pw := logPipe(t)
	cmd := exec.Command(bin, "-config", drainConf(t))
	cmd.Env = append(os.Environ(), "XDG_RUNTIME_DIR="+t.TempDir())
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close() // rotor holds the only write end
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // owner: the test; ends when rotor does
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addrs := readListening(t, pr, "http", "admin")
	pr.Close() // the log reader goes away

	c := openTunnel(t, addrs["http"], target)
	c.Close() // its line goes to the closed pipe
	dropped := 0
	for deadline := time.Now().Add(20 * time.Second); dropped == 0; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("rotor died writing to a closed stderr: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no dropped log line counted within 20s")
		}
		code, body, err := get(t, "http://"+addrs["admin"]+"/metrics")
		if err != nil || code != 200 {
			continue
		}
		if m := droppedMetric.FindStringSubmatch(body); m != nil {
			dropped, _ = strconv.Atoi(m[1])
		}
	}
	c = openTunnel(t, addrs["http"], target) // still serving
	c.Close()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Errorf("rotor with a closed stderr, after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rotor still running 30s after SIGTERM")
	}
}
