package gateway

// The leak test of issue 7: thousands of aborted, garbage and half-open
// client connections against both fronts, and requests through upstreams
// that fail in every way the fakes can, must leave the goroutine count and
// the open file descriptors where they were.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// leakHandshake is listen.handshake_timeout in the leak and hardening
// tests: short, so slow clients are cut off quickly.
const leakHandshake = 300 * time.Millisecond

// countFDs counts this process's open file descriptors, pipes aside: the
// only pipes are the runtime's splice(2) pipe cache (internal/poll keeps
// pipes for io.Copy between TCP conns in a sync.Pool that the GC empties),
// which grows with tunnel concurrency and is not rotor's to close.
func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			continue
		}
		n++
	}
	return n
}

// socksHello is a SOCKS5 greeting (no-auth, or username/password when
// user is set), the RFC 1929 sub-negotiation, and a CONNECT request for
// addr (host:port, host as a domain name or IP literal sent as FQDN).
func socksHello(user, pass, addr string) []byte {
	host, portStr, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portStr)
	var b []byte
	if user != "" {
		b = append(b, 5, 1, 2, 1, byte(len(user)))
		b = append(b, user...)
		b = append(b, byte(len(pass)))
		b = append(b, pass...)
	} else {
		b = append(b, 5, 1, 0)
	}
	b = append(b, 5, 1, 0, 3, byte(len(host)))
	b = append(b, host...)
	return append(b, byte(port>>8), byte(port))
}

// connectHello is an HTTP CONNECT request for addr.
func connectHello(addr string) []byte {
	return []byte("CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n")
}

// readToClose reads until the server closes the connection or the
// deadline passes; it returns what was read and whether the server closed.
func readToClose(c net.Conn, d time.Duration) ([]byte, bool) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(io.LimitReader(c, 1<<20))
	var ne net.Error
	return b, !(errors.As(err, &ne) && ne.Timeout())
}

// leakClient runs one kind of abusive client against a gateway.
type leakClient struct {
	t      *testing.T
	srv    *Server
	target string // address requests ask for
}

func (lc *leakClient) dial(front string) net.Conn {
	c, err := net.DialTimeout("tcp", lc.srv.Addr(front), 5*time.Second)
	if err != nil {
		lc.t.Errorf("dial %s: %v", front, err)
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

func (lc *leakClient) hello(front string) []byte {
	if front == "socks5" {
		return socksHello("", "", lc.target)
	}
	return connectHello(lc.target)
}

// connectClose connects and closes at once.
func (lc *leakClient) connectClose(front string, _ *rand.Rand) {
	if c := lc.dial(front); c != nil {
		_ = c.Close()
	}
}

// partial sends a strict prefix of a valid handshake, then closes; half of
// the time with an RST instead of a FIN.
func (lc *leakClient) partial(front string, r *rand.Rand) {
	c := lc.dial(front)
	if c == nil {
		return
	}
	h := lc.hello(front)
	_, _ = c.Write(h[:1+r.IntN(len(h)-1)])
	if r.IntN(2) == 0 {
		_ = c.(*net.TCPConn).SetLinger(0)
	}
	_ = c.Close()
}

// garbage sends random bytes, half-closes and waits for the server to
// close.
func (lc *leakClient) garbage(front string, r *rand.Rand) {
	c := lc.dial(front)
	if c == nil {
		return
	}
	defer c.Close()
	b := make([]byte, 1+r.IntN(2048))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	_, _ = c.Write(b)
	_ = c.(*net.TCPConn).CloseWrite()
	if _, closed := readToClose(c, 5*time.Second); !closed {
		lc.t.Errorf("%s front kept a garbage client open after it half-closed", front)
	}
}

// hang sends the start of a valid handshake and goes silent: the front
// must close it at the handshake deadline.
func (lc *leakClient) hang(front string, _ *rand.Rand) {
	c := lc.dial(front)
	if c == nil {
		return
	}
	defer c.Close()
	start := time.Now()
	if front == "socks5" {
		_, _ = c.Write([]byte{5, 1, 0})
	} else {
		_, _ = c.Write([]byte("CONNECT " + lc.target + " HTTP/1.1\r\nHost: "))
	}
	if _, closed := readToClose(c, 10*leakHandshake); !closed {
		lc.t.Errorf("%s front kept a silent client open for %v (handshake deadline %v)", front, time.Since(start), leakHandshake)
	}
}

// request sends a complete request (SOCKS CONNECT, HTTP CONNECT, or HTTP
// forward) and reads the answer to the end; a third of the time it
// resets the connection right after sending instead (the client is gone
// before rotor answers).
func (lc *leakClient) request(front string, r *rand.Rand) {
	c := lc.dial(front)
	if c == nil {
		return
	}
	defer c.Close()
	var req []byte
	switch {
	case front == "socks5":
		req = socksHello("", "", lc.target)
	case r.IntN(2) == 0:
		req = connectHello(lc.target)
	default:
		req = []byte("GET http://" + lc.target + "/ok HTTP/1.1\r\nHost: " + lc.target + "\r\n\r\n")
	}
	_, _ = c.Write(req)
	if r.IntN(3) == 0 {
		_ = c.(*net.TCPConn).SetLinger(0)
		return
	}
	if _, closed := readToClose(c, 8*time.Second); !closed {
		lc.t.Errorf("%s front: no end to the answer of a failing request", front)
	}
}

// tunnelAbort opens a working tunnel, sends the start of an HTTP request
// through it and resets the connection mid-way.
func (lc *leakClient) tunnelAbort(front string, r *rand.Rand) {
	c := lc.dial(front)
	if c == nil {
		return
	}
	defer c.Close()
	_, _ = c.Write(lc.hello(front))
	buf := make([]byte, 512)
	if front == "socks5" {
		if _, err := io.ReadFull(c, buf[:2+10]); err != nil || buf[3] != repSuccess {
			lc.t.Errorf("socks5 tunnel: reply %x, err %v", buf[:12], err)
			return
		}
	} else if n, err := c.Read(buf); err != nil || string(buf[:12]) != "HTTP/1.1 200" {
		lc.t.Errorf("CONNECT tunnel: %q, err %v", buf[:n], err)
		return
	}
	if r.IntN(3) == 0 {
		// The tunnel carries data: one whole request and its answer.
		fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: %s\r\n\r\n", lc.target)
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
			lc.t.Errorf("%s tunnel: GET /ok: %v %v", front, statusOf(resp), err)
		}
	}
	_, _ = c.Write([]byte("GET /slow HTTP/1.1\r\nHost: x\r\n"))
	if r.IntN(2) == 0 {
		_ = c.(*net.TCPConn).SetLinger(0)
	}
}

// run runs n clients of kind op against front on `workers` goroutines.
func (lc *leakClient) run(workers, n int, front string, op func(string, *rand.Rand)) {
	var wg sync.WaitGroup
	jobs := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed uint64) { // owner: run; ends when jobs is closed
			defer wg.Done()
			r := rand.New(rand.NewPCG(seed, 7))
			for range jobs {
				op(front, r)
			}
		}(uint64(w))
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}

// closeForwardIdle drops the forward path's pooled idle upstream
// connections: a bounded cache, not a leak, that would blur the count.
func closeForwardIdle(srv *Server) {
	srv.transports.Range(func(_, v any) bool {
		if t, ok := v.(*http.Transport); ok {
			t.CloseIdleConnections()
		}
		return true
	})
}

// waitBaseline waits up to max for goroutines and fds to come back to
// their baselines plus slack, and reports what remains otherwise.
func waitBaseline(t *testing.T, goroutines, fds, slack int, max time.Duration, srvs ...*Server) {
	t.Helper()
	deadline := time.Now().Add(max)
	for {
		for _, s := range srvs {
			closeForwardIdle(s)
		}
		g, f := runtime.NumGoroutine(), countFDs(t)
		if g <= goroutines+slack && f <= fds+slack {
			t.Logf("goroutines %d (baseline %d), fds %d (baseline %d)", g, goroutines, f, fds)
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 2<<20)
			buf = buf[:runtime.Stack(buf, true)]
			sockets := describeFDs()
			// Conns dropped without Close are closed by their finalizer:
			// if a GC releases the fds, something lost a conn.
			runtime.GC()
			runtime.GC()
			time.Sleep(100 * time.Millisecond)
			t.Fatalf("leak: goroutines %d (baseline %d), fds %d (baseline %d) after %v; after a forced GC: %d fds\nopen fds:\n%s\n%s",
				g, goroutines, f, fds, max, countFDs(t), sockets, buf)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLeakAbusiveClientsAndFailingUpstreams(t *testing.T) {
	countFDs(t) // skips without /proc
	target := upstreamtest.NewTarget(t)
	unreachable := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 4}})
	blackHole := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.BlackHole}})
	garbage := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Garbage}})
	hangConnect := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}})
	working := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})

	common := fmt.Sprintf(`
[listen]
socks5 = "127.0.0.1:0"
http   = "127.0.0.1:0"
admin  = "127.0.0.1:0"
handshake_timeout = "300ms"

[probe]
url     = %q
timeout = "300ms"

[cooldown.refused]
base = "100ms"
max  = "200ms"
[cooldown.timeout]
base = "100ms"
max  = "200ms"
[cooldown.upstream_error]
base = "100ms"
max  = "200ms"
`, target.URL("/ok"))
	pool := func(timeout string) string {
		return fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 2\nwait_for_upstream = %q\nconnect_timeout = %q\nhandshake_timeout = %q\n",
			timeout, timeout, timeout)
	}
	failing, _ := startGateway(t, common+pool("300ms")+fmt.Sprintf(`
[[upstream]]
url = %q
[[upstream]]
url = %q
[[upstream]]
url = %q
[[upstream]]
url = %q
[[upstream]]
url = "socks5://%s"
`, unreachable.URL(), blackHole.URL(), garbage.URL(), hangConnect.URL(), upstreamtest.ClosedPort(t)))
	// The working gateway's timeouts are generous: under -race and the
	// load above, a loopback handshake can take longer than 300ms, and a
	// cooled upstream would turn the tunnel phase into failures.
	good, goodLogs := startGateway(t, common+pool("5s")+fmt.Sprintf("[[upstream]]\nurl = %q\n", working.URL()))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("working gateway's log:\n%s", goodLogs)
		}
	})

	bad := &leakClient{t: t, srv: failing, target: target.Addr()}
	ok := &leakClient{t: t, srv: good, target: target.Addr()}

	// Warm up every path once, so lazily built state (transports, sync
	// pools, timers) is part of the baseline.
	for _, front := range []string{"socks5", "http"} {
		r := rand.New(rand.NewPCG(1, 1))
		bad.request(front, r)
		bad.garbage(front, r)
		ok.tunnelAbort(front, r)
	}
	time.Sleep(300 * time.Millisecond)
	baseG, baseF := runtime.NumGoroutine(), countFDs(t)

	start := time.Now()
	total := 0
	phase := func(name string, workers, n int, lc *leakClient, op func(*leakClient) func(string, *rand.Rand)) {
		for _, front := range []string{"socks5", "http"} {
			lc.run(workers, n, front, op(lc))
			total += n
		}
		t.Logf("%-14s %4d per front, %v so far", name, n, time.Since(start).Round(time.Millisecond))
	}
	phase("connect-close", 16, 350, bad, func(lc *leakClient) func(string, *rand.Rand) { return lc.connectClose })
	phase("partial", 16, 300, bad, func(lc *leakClient) func(string, *rand.Rand) { return lc.partial })
	phase("garbage", 16, 250, bad, func(lc *leakClient) func(string, *rand.Rand) { return lc.garbage })
	phase("hang", 150, 150, bad, func(lc *leakClient) func(string, *rand.Rand) { return lc.hang })
	phase("failing", 32, 300, bad, func(lc *leakClient) func(string, *rand.Rand) { return lc.request })
	phase("tunnel-abort", 16, 150, ok, func(lc *leakClient) func(string, *rand.Rand) { return lc.tunnelAbort })
	t.Logf("%d client connections in %v", total, time.Since(start).Round(time.Millisecond))

	t.Logf("upstream connections: unreachable %d, black hole %d, garbage %d, hang-connect %d, working %d",
		unreachable.Connections(), blackHole.Connections(), garbage.Connections(), hangConnect.Connections(), working.Connections())

	waitBaseline(t, baseG, baseF, 8, 10*time.Second, failing, good)
	for _, s := range []*Server{failing, good} {
		ts := time.Now()
		if err := s.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		t.Logf("shutdown took %v", time.Since(ts))
	}
}

// describeFDs lists this process's open fds other than pipes, with the
// addresses of TCP sockets (from /proc/net/tcp, or getsockname for sockets
// whose connection is gone), to tell which peer a leaked fd belongs to.
func describeFDs() string {
	conns := map[string]string{} // inode → "local -> remote STATE"
	states := map[string]string{"01": "ESTABLISHED", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "0A": "LISTEN", "04": "FIN_WAIT1", "05": "FIN_WAIT2", "09": "LAST_ACK"}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if fl := strings.Fields(line); len(fl) > 9 {
				conns[fl[9]] = fmt.Sprintf("%s -> %s %s", hexAddr(fl[1]), hexAddr(fl[2]), states[fl[3]])
			}
		}
	}
	var out []string
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || strings.HasPrefix(l, "pipe:") {
			continue
		}
		desc := l
		if inode, ok := strings.CutPrefix(l, "socket:["); ok {
			if c, ok := conns[strings.TrimSuffix(inode, "]")]; ok {
				desc += " " + c
			} else if fd, err := strconv.Atoi(e.Name()); err == nil {
				if sa, err := syscall.Getsockname(fd); err == nil {
					if sa4, ok := sa.(*syscall.SockaddrInet4); ok {
						desc += fmt.Sprintf(" %d.%d.%d.%d:%d (connection gone)", sa4.Addr[0], sa4.Addr[1], sa4.Addr[2], sa4.Addr[3], sa4.Port)
					}
				}
			}
		}
		out = append(out, "fd "+e.Name()+": "+desc)
	}
	return strings.Join(out, "\n")
}

// hexAddr decodes an IPv4 /proc/net/tcp address; IPv6 ones stay hex.
func hexAddr(h string) string {
	ip, port, ok := strings.Cut(h, ":")
	p, _ := strconv.ParseUint(port, 16, 16)
	if !ok || len(ip) != 8 {
		return h
	}
	v, _ := strconv.ParseUint(ip, 16, 32)
	return fmt.Sprintf("%d.%d.%d.%d:%d", byte(v), byte(v>>8), byte(v>>16), byte(v>>24), p)
}
