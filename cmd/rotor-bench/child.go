package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// child is a process this tool started. Stop ends it by PID only.
type child struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once Wait returned
	err  error         // Wait's result, valid after done
}

// startChild starts cmd and a goroutine that waits for it. The goroutine is
// owned by the child and ends when the process exits, which Stop guarantees.
func startChild(cmd *exec.Cmd) (*child, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// PID is the child's process id.
func (c *child) PID() int { return c.cmd.Process.Pid }

// Exited reports whether the child has exited.
func (c *child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, then SIGKILL after grace, and waits for the exit.
func (c *child) Stop(grace time.Duration) {
	if c.Exited() {
		return
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
		return
	case <-time.After(grace):
	}
	c.cmd.Process.Kill()
	<-c.done
}

// relayChild is the relay running as a child process of this tool, so its
// CPU, RSS and fds can be read from /proc exactly like the gateway's.
type relayChild struct {
	*child
	stdin     io.Closer
	SOCKSAddr string
	HTTPAddr  string // empty unless started with an HTTP listener
}

// startRelayChild runs "rotor-bench relay" and waits for its ready line.
// With forward set ("socks5 addr", "http addr") it is a pure hop to them
// (see startHop).
func startRelayChild(socksAddr, httpAddr, copyMode string, forward ...string) (*relayChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	args := []string{"relay", "-listen", socksAddr, "-copy", copyMode}
	if httpAddr != "" {
		args = append(args, "-http-listen", httpAddr)
	}
	if len(forward) == 2 {
		args = append(args, "-forward-to", forward[0], "-forward-http-to", forward[1])
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	ch, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	r := &relayChild{child: ch, stdin: stdin}
	line := make(chan string, 1)
	go func() { // ends at the first line or when the child's stdout closes
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- s
		io.Copy(io.Discard, stdout)
	}()
	select {
	case s := <-line:
		for _, f := range strings.Fields(s) {
			if v, ok := strings.CutPrefix(f, "socks5="); ok {
				r.SOCKSAddr = v
			}
			if v, ok := strings.CutPrefix(f, "http="); ok {
				r.HTTPAddr = v
			}
		}
	case <-time.After(10 * time.Second):
	}
	if r.SOCKSAddr == "" {
		r.Stop()
		return nil, errors.New("relay child did not report its address")
	}
	return r, nil
}

// Stop closes the child's stdin (its exit signal) and stops it by PID.
func (r *relayChild) Stop() {
	r.stdin.Close()
	r.child.Stop(5 * time.Second)
}

// relayMain is the "relay" subcommand: it serves until stdin reaches EOF
// (the parent died or closed it) or SIGTERM/SIGINT arrives.
func relayMain(args []string) int {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "SOCKS5 listen address (loopback)")
	httpListen := fs.String("http-listen", "", "optional plain HTTP proxy listen address (plumbing runs only)")
	copyMode := fs.String("copy", "idle", "copy mode: idle (splice, 2 fds per idle tunnel) or iocopy (plain io.Copy)")
	forwardTo := fs.String("forward-to", "", "be a pure TCP hop: splice every connection on -listen to this address")
	forwardHTTPTo := fs.String("forward-http-to", "", "with -forward-to: splice connections on -http-listen to this address")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cp, ok := copyFuncs[*copyMode]
	if !ok {
		fmt.Fprintf(os.Stderr, "relay: unknown -copy %q\n", *copyMode)
		return 2
	}
	for _, a := range []string{*listen, *httpListen, *forwardTo, *forwardHTTPTo} {
		if a != "" && !isLoopbackAddr(a) {
			fmt.Fprintf(os.Stderr, "relay: %s is not a loopback address\n", a)
			return 2
		}
	}
	raiseNofile()
	var r *relay
	var err error
	if *forwardTo != "" {
		r, err = startHop(*listen, *forwardTo, *httpListen, *forwardHTTPTo, cp)
	} else {
		r, err = startRelay(*listen, *httpListen, cp)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "relay:", err)
		return 1
	}
	ready := "relay socks5=" + r.socks.Addr().String()
	if r.http != nil {
		ready += " http=" + r.http.Addr().String()
	}
	fmt.Println(ready)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	eof := make(chan struct{})
	go func() { // ends when stdin closes; the process exits right after
		io.Copy(io.Discard, os.Stdin)
		close(eof)
	}()
	select {
	case <-sig:
	case <-eof:
	}
	r.Close()
	return 0
}
