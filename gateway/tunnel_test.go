package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/internal/splice"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// rawSOCKS sends a no-auth greeting, a CONNECT for addr and extra bytes in
// ONE write, as optimistic clients do, and returns the conn after the reply.
func rawSOCKS(t *testing.T, front, addr string, extra []byte) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	host, portStr, _ := net.SplitHostPort(addr)
	var port int
	fmt.Sscan(portStr, &port)
	b := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	b = append(b, host...)
	b = append(b, byte(port>>8), byte(port))
	b = append(b, extra...)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	head := make([]byte, 2+10)
	if _, err := io.ReadFull(br, head); err != nil {
		t.Fatalf("reply: %v", err)
	}
	if head[3] != 0 {
		t.Fatalf("SOCKS reply %#x", head[3])
	}
	return c, br
}

func TestSOCKSPipelinedDataReachesTarget(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n%s\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\n", probeConf(target)))
	get := "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	_, br := rawSOCKS(t, srv.Addr("socks5"), target.Addr(), []byte(get))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("pipelined request lost: %v", err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// stallTarget answers the first request with part of a body, then reads
// whatever comes next and never answers again.
func stallTarget(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { close(done); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err != nil {
					return
				}
				_, _ = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial"))
				_, _ = io.Copy(io.Discard, c) // until the client side closes
			}()
		}
	}()
	return ln.Addr().String()
}

func TestTunnelStallWhileClientWaitsIsSlowBody(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	stall := stallTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, logs := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[slow_body]\nstall = \"300ms\"\n[[upstream]]\nurl = %q\nname = \"up\"\n", probeConf(target), up.URL().String()))
	c, br := rawSOCKS(t, srv.Addr("socks5"), stall, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatal(err)
	}
	// Ask again: the client now waits and nothing comes back. (The kernel
	// stamps arrivals in jiffies; 20ms keeps the two arrivals apart, as a
	// real client's think time does.)
	time.Sleep(20 * time.Millisecond)
	if _, err := c.Write([]byte("more?")); err != nil {
		t.Fatal(err)
	}
	waitState(t, srv, "up", health.Cooling)
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	if h := snap.History[len(snap.History)-1]; h.Reason != health.SlowBody || h.Stage != health.StageBody {
		t.Errorf("last transition = %+v, want slow_body at body", h)
	}
	// The line names its tunnel, so it can be told from the others on
	// the upstream (it had no conn_id and no listener).
	var lines []map[string]any
	eventuallyTrue(t, "the stall's line", func() bool {
		lines = linesWith(t, logs, "tunnel stalled while the client waits")
		return len(lines) > 0
	})
	if l := lines[0]; l["conn_id"] == nil || l["listener"] != "socks5" || l["upstream"] != "up" || l["class"] != "slow_body" {
		t.Errorf("stall line %v, want its conn_id, listener socks5, upstream up, class slow_body", l)
	}
}

func TestIdleTunnelKeptWhenNobodyWaits(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	stall := stallTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[slow_body]\nstall = \"200ms\"\n[[upstream]]\nurl = %q\nname = \"up\"\n", probeConf(target), up.URL().String()))
	_, br := rawSOCKS(t, srv.Addr("socks5"), stall, []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatal(err)
	}
	// The client asked nothing more: silence is not slowness.
	time.Sleep(700 * time.Millisecond)
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	if snap.State != health.Eligible || snap.Failures[health.SlowBody] != 0 {
		t.Errorf("idle tunnel counted as slow: state %v failures %v", snap.State, snap.Failures)
	}
}

func TestFailedTunnelLogLineCarriesClassAndStage(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv, logs := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = \"socks5://u:canary-pw-9@%s\"\nname = \"dead\"\n", probeConf(target), upstreamtest.ClosedPort(t)))
	socksConnect(t, srv.Addr("socks5"), target.Addr())
	waitFor(t, func() bool { return strings.Contains(logs.String(), `"message":"tunnel closed"`) })
	line := ""
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "tunnel closed") {
			line = l
		}
	}
	for _, want := range []string{`"class":"refused"`, `"stage":"dial"`, `"upstream":"dead"`, `"target":"` + target.Addr()} {
		if !strings.Contains(line, want) {
			t.Errorf("summary line %s lacks %s", line, want)
		}
	}
	if strings.Contains(logs.String(), "canary-pw-9") {
		t.Error("upstream password in logs")
	}
}

// waitFor polls cond for up to 5s: for effects that have no signal to wait
// on (a log line written after the client was answered).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 500; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("condition not met within 5s")
}

// TestTunnelEndsWhenUpstreamFinishedAndClientStaysSilent: the upstream side
// sent its answer and closed; a client that never closes its side must not
// hold the tunnel past the half-close linger (watched, so an active upload
// is never cut).
func TestTunnelEndsWhenUpstreamFinishedAndClientStaysSilent(t *testing.T) {
	setHalfCloseLinger(400 * time.Millisecond)
	t.Cleanup(func() { setHalfCloseLinger(60 * time.Second) })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("bye"))
			c.Close()
		}
	}()
	target := upstreamtest.NewTarget(t)
	srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n%s\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\n", probeConf(target)))
	_, br := rawSOCKS(t, srv.Addr("socks5"), ln.Addr().String(), nil)
	buf := make([]byte, 3)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatal(err)
	}
	// The client keeps its side open and silent.
	start := time.Now()
	waitFor(t, func() bool { return srv.tunnels.count() == 0 })
	if el := time.Since(start); el > 4*time.Second {
		t.Fatalf("tunnel outlived the linger by far: %v", el)
	}
}

// echoTarget echoes every connection until it closes.
func echoTarget(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// TestIdleTunnelsHoldNoGoroutine: established tunnels that went idle hold
// no relay goroutine (their directions are parked in the reactor), and
// wake up for the next bytes either way.
func TestIdleTunnelsHoldNoGoroutine(t *testing.T) {
	echo := echoTarget(t)
	srv, _ := startGateway(t, "allow_private_destinations = true\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\n")
	if srv.reactor == nil {
		t.Fatal("no reactor on Linux")
	}
	const n = 20
	conns := make([]*bufio.Reader, n)
	raw := make([]net.Conn, n)
	buf := make([]byte, 5)
	for i := range conns {
		raw[i], conns[i] = rawSOCKS(t, srv.Addr("socks5"), echo, []byte("hello"))
		if _, err := io.ReadFull(conns[i], buf); err != nil || string(buf) != "hello" {
			t.Fatalf("tunnel %d echo %q, %v", i, buf, err)
		}
	}
	relaying := func() int {
		b := make([]byte, 4<<20)
		stacks := string(b[:runtime.Stack(b, true)])
		return strings.Count(stacks, "splice.(*Pump).run") + strings.Count(stacks, "gateway.relay(")
	}
	deadline := time.Now().Add(5 * time.Second)
	for relaying() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines still relay %d idle tunnels", relaying(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := srv.tunnels.count(); got != n {
		t.Fatalf("%d tunnels registered, want %d", got, n)
	}
	for i := range conns {
		if _, err := raw[i].Write([]byte("again")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conns[i], buf); err != nil || string(buf) != "again" {
			t.Fatalf("tunnel %d after idling: %q, %v", i, buf, err)
		}
		raw[i].Close()
	}
	deadline = time.Now().Add(5 * time.Second)
	for srv.tunnels.count() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels still open after their clients closed", srv.tunnels.count())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestTunnelsEndWhenDownloadingClientsLeave: clients that close in the
// middle of a download (unread data: the kernel resets) end their tunnels
// at once; none waits for the half-close linger.
func TestTunnelsEndWhenDownloadingClientsLeave(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() { // an endless source; its writes fail once the tunnel is gone
		chunk := make([]byte, 64<<10)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	srv, _ := startGateway(t, "allow_private_destinations = true\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\n")
	var wg sync.WaitGroup
	for range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, br := rawSOCKS(t, srv.Addr("socks5"), ln.Addr().String(), nil)
			_, _ = io.CopyN(io.Discard, br, 4<<20)
			// Past the pumps' linger: the silent client→upstream
			// direction is parked in the reactor when the reset comes.
			time.Sleep(2 * splice.LingerWait)
			c.Close()
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(10 * time.Second) // the linger is 60s
	for srv.tunnels.count() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d tunnels still open 10s after their clients left", srv.tunnels.count())
		}
		time.Sleep(20 * time.Millisecond)
	}
}
