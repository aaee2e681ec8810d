// Package clustertest runs a private redis-server for fleet tests: on a
// free loopback port, without automatic persistence (a test that wants a
// restart to keep the data sends SAVE), stopped by PID through t.Cleanup. It owns no production code and is imported only by tests.
package clustertest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Redis is one private redis-server process (restartable on its port).
type Redis struct {
	t    testing.TB
	bin  string
	port int
	dir  string // working directory: dump.rdb after a SAVE

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while stopped
	exited chan struct{} // closed once cmd has exited (its Wait returned)
}

// Binary returns the redis-server path. When it is missing the test is
// skipped, or fails when CI=true or ROTOR_FLEET=1 (the fleet suite must run
// there: install the Debian package redis-server).
func Binary(t testing.TB) string {
	t.Helper()
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p
	}
	const msg = "redis-server not found in PATH: fleet tests need the Debian package redis-server (apt-get install redis-server)"
	if os.Getenv("CI") == "true" || os.Getenv("ROTOR_FLEET") == "1" {
		t.Fatal(msg + " [required because CI=true or ROTOR_FLEET=1]")
	}
	t.Skip(msg + "; skipping (set ROTOR_FLEET=1 to make this a failure)")
	return ""
}

// Start runs redis-server on a free 127.0.0.1 port.
func Start(t testing.TB) *Redis {
	t.Helper()
	r := &Redis{t: t, bin: Binary(t), port: freePort(t), dir: t.TempDir()}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Addr is "127.0.0.1:port".
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// URL is the redis:// URL of database 0.
func (r *Redis) URL() string { return "redis://" + r.Addr() + "/0" }

// Start (re)starts the server on its port and waits until it answers
// PING. It starts empty unless a SAVE since the first Start wrote a
// snapshot, which it then loads (a Redis restarted with its data).
func (r *Redis) Start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
spawn:
	for {
		cmd, exited, out := r.spawn()
		for !ping(r.Addr()) {
			select {
			case <-exited:
				// The port was taken meanwhile, most often briefly, as the
				// ephemeral source port of some other connection on the
				// machine (the port came from the ephemeral range): retry.
				if time.Now().After(deadline) {
					r.t.Fatalf("clustertest: redis-server on %s exited: %s", r.Addr(), out.String())
				}
				time.Sleep(100 * time.Millisecond)
				continue spawn
			default:
			}
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				<-exited
				r.t.Fatalf("clustertest: redis-server on %s did not answer PING: %s", r.Addr(), out.String())
			}
			time.Sleep(20 * time.Millisecond) // process start-up: no event to wait on
		}
		r.cmd, r.exited = cmd, exited
		return
	}
}

// spawn starts one redis-server process. exited is closed once it has
// exited; out (its output) may be read only then. Caller holds mu.
func (r *Redis) spawn() (cmd *exec.Cmd, exited chan struct{}, out *bytes.Buffer) {
	r.t.Helper()
	cmd = exec.Command(r.bin, "--save", "", "--appendonly", "no", "--port", strconv.Itoa(r.port),
		"--bind", "127.0.0.1", "--protected-mode", "no", "--loglevel", "warning", "--dir", r.dir)
	out = &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("clustertest: start redis-server: %v", err)
	}
	exited = make(chan struct{})
	go func() { // owner: Redis; ends when the process exits (Stop kills it)
		_ = cmd.Wait()
		close(exited)
	}()
	return cmd, exited, out
}

// Stop kills the server (by PID) and waits for it to exit. Idempotent.
func (r *Redis) Stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.exited
	r.cmd = nil
}

// Do sends one command (inline protocol) and returns the first reply line,
// for assertions on keys.
func (r *Redis) Do(args ...string) string {
	r.t.Helper()
	c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
	if err != nil {
		r.t.Fatalf("clustertest: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		r.t.Fatalf("clustertest: %v", err)
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		r.t.Fatalf("clustertest: %v", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if strings.HasPrefix(line, "$") {
		if line == "$-1" {
			return ""
		}
		v, err := br.ReadString('\n')
		if err != nil {
			r.t.Fatalf("clustertest: %v", err)
		}
		return strings.TrimRight(v, "\r\n")
	}
	return line
}

func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("clustertest: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
