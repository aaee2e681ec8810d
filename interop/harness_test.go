// Package interop runs rotor against real proxy servers (squid, dante,
// microsocks, tinyproxy) and real clients (curl, proxychains4, headless
// Chromium, Node's socks-proxy-agent and https-proxy-agent) on loopback.
//
// The suite runs only with ROTOR_INTEROP=1 (see interop/run.sh, which first
// installs the Debian packages through .ci/interop-deps.sh). Without it every
// test reports itself skipped. With it, a missing component fails the test
// that needs it, naming the component: the suite never skips silently.
//
// Each upstream kind exits from its own loopback address, so the in-process
// test target can tell them apart by the source address of a request.
package interop

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// enabled reports whether the suite was asked to run.
var enabled = os.Getenv("ROTOR_INTEROP") == "1"

const skipLine = "interop: skipped (set ROTOR_INTEROP=1)"

// results counts leaf cases (tests that called caseT) by outcome, so that
// TestMain can print one summary line that counts each case.
var results struct {
	mu      sync.Mutex
	passed  []string
	failed  []string
	skipped []string
}

// buildDir holds the rotor binary built once for the whole run.
var buildDir string

func TestMain(m *testing.M) {
	if !enabled {
		fmt.Println(skipLine)
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "rotor-interop-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "interop:", err)
		os.Exit(1)
	}
	buildDir = dir
	code := m.Run()
	os.RemoveAll(dir)

	results.mu.Lock()
	sort.Strings(results.failed)
	for _, name := range results.failed {
		fmt.Println("interop: FAIL", name)
	}
	fmt.Printf("interop: %d passed, %d failed, %d skipped\n",
		len(results.passed), len(results.failed), len(results.skipped))
	results.mu.Unlock()
	os.Exit(code)
}

// begin skips t unless the suite is enabled. Every test and every group of
// cases calls it first. A group that fails with no failed case under it (its
// setup failed) is counted as one failed case, so the summary never hides it.
func begin(t *testing.T) {
	t.Helper()
	if !enabled {
		t.Skip(skipLine)
	}
	name := t.Name()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		results.mu.Lock()
		defer results.mu.Unlock()
		for _, f := range results.failed {
			if strings.HasPrefix(f, name+"/") {
				return
			}
		}
		results.failed = append(results.failed, name+" (setup)")
	})
}

// caseT marks t as one counted case of the summary line.
func caseT(t *testing.T) {
	t.Helper()
	if !enabled {
		t.Skip(skipLine)
	}
	name := t.Name()
	t.Cleanup(func() {
		results.mu.Lock()
		defer results.mu.Unlock()
		switch {
		case t.Failed():
			results.failed = append(results.failed, name)
		case t.Skipped():
			results.skipped = append(results.skipped, name)
		default:
			results.passed = append(results.passed, name)
		}
	})
}

// requireBin returns the path of a component, failing t when it is missing.
func requireBin(t *testing.T, name string, candidates ...string) string {
	t.Helper()
	for _, c := range append(candidates, name) {
		if strings.Contains(c, "/") {
			if st, err := os.Stat(c); err == nil && !st.IsDir() {
				return c
			}
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	t.Fatalf("interop: component missing: %s (install it with .ci/interop-deps.sh)", name)
	return ""
}

// requireRoot fails t unless it runs as root (squid's user switch, dante's
// system user and chpasswd need it).
func requireRoot(t *testing.T, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("interop: must run as root: %s", why)
	}
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func hostPort(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }

// waitAccept waits until addr accepts TCP connections or p exits.
func waitAccept(t *testing.T, p *proc, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		if p != nil && p.exited() {
			t.Fatalf("%s exited before accepting on %s: %v\n%s", p.name, addr, p.waitErr(), p.tail())
		}
		if time.Now().After(deadline) {
			msg := ""
			if p != nil {
				msg = p.tail()
			}
			t.Fatalf("%s not accepting within %v: %v\n%s", addr, within, err, msg)
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// waitRefused waits until addr refuses connections (a stopped server).
func waitRefused(t *testing.T, addr string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(30 * time.Millisecond)
	}
	t.Fatalf("%s still accepting after %v", addr, within)
}

// proc is a child process in its own process group.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
	once sync.Once
}

// startProc starts argv in its own process group with output to a log file
// in dir, and stops it (the whole group) when t ends.
func startProc(t *testing.T, name, dir string, argv ...string) *proc {
	t.Helper()
	logPath := filepath.Join(dir, name+".out")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("%s log: %v", name, err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", name, err)
	}
	f.Close()
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, p.tail())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) waitErr() error {
	if p.exited() {
		return p.err
	}
	return nil
}

// stop sends SIGTERM to p's process group, then SIGKILL after 5s. It only
// signals the group of a process this suite started, by its PID.
func (p *proc) stop() {
	p.once.Do(func() {
		pid := p.cmd.Process.Pid
		if !p.exited() {
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				_ = syscall.Kill(-pid, syscall.SIGKILL)
				<-p.done
			}
		}
		// Children (squid helpers, dante's subprocesses) may outlive the
		// leader briefly; the group id is still ours.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	})
}

// stopLeader sends SIGTERM to p's PID only (not its group) and reports
// whether the whole process group was gone within d: servers that fork
// helpers must take them down themselves.
func (p *proc) stopLeader(d time.Duration) (exitErr error, groupGone bool) {
	pid := p.cmd.Process.Pid
	p.once.Do(func() {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(d):
			_ = syscall.Kill(pid, syscall.SIGKILL)
			<-p.done
		}
	})
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pid, 0); errors.Is(err, syscall.ESRCH) {
			return p.err, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // leftovers: ours, by group id
	return p.err, false
}

// kill stops p at once with SIGKILL to its group (a crashed upstream).
func (p *proc) kill() {
	p.once.Do(func() {
		pid := p.cmd.Process.Pid
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-p.done
	})
}

// tail returns the last lines of p's output.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// ---- rotor ----------------------------------------------------------------

var rotorBuild struct {
	once sync.Once
	path string
	err  error
}

// moduleRoot returns the directory holding rotor's go.mod.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("go.mod not found above " + wd)
		}
	}
}

// rotorBinary builds ./cmd/rotor once per run and returns its path; with
// ROTOR_BIN set it uses that binary instead.
func rotorBinary(t *testing.T) string {
	t.Helper()
	rotorBuild.once.Do(func() {
		if bin := os.Getenv("ROTOR_BIN"); bin != "" {
			// A prebuilt binary (CI may build it once for several suites).
			if _, err := os.Stat(bin); err != nil {
				rotorBuild.err = fmt.Errorf("ROTOR_BIN: %v", err)
			}
			rotorBuild.path = bin
			return
		}
		root, err := moduleRoot()
		if err != nil {
			rotorBuild.err = err
			return
		}
		out := filepath.Join(buildDir, "rotor")
		cmd := exec.Command("go", "build", "-o", out, "./cmd/rotor")
		cmd.Dir = root
		b, err := cmd.CombinedOutput()
		if err != nil {
			rotorBuild.err = fmt.Errorf("go build ./cmd/rotor: %v\n%s", err, b)
			return
		}
		rotorBuild.path = out
	})
	if rotorBuild.err != nil {
		t.Fatalf("interop: component missing: rotor binary: %v", rotorBuild.err)
	}
	return rotorBuild.path
}

// rotorOpts configures one rotor instance.
type rotorOpts struct {
	Upstreams []rotorUpstream
	ProbeURL  string
	// Cooldown is the base/max for every class except refused and timeout,
	// which always use 1s/2s.
	CooldownBase, CooldownMax string
	Extra                     string // more TOML appended verbatim
	PoolExtra                 string // more keys for the [pool] table
	// NoWait skips waiting until every upstream is eligible (records start
	// probe_allowed and need a passing probe first).
	NoWait bool
}

type rotorUpstream struct {
	Name, URL string
	Pipeline  bool // pipeline = true (socks5)
}

// rotor is a running rotor child process.
type rotor struct {
	p                  *proc
	SOCKS, HTTP, Admin string
	Config             string
}

// startRotor writes a config for o and runs rotor with it until t ends.
func startRotor(t *testing.T, o rotorOpts) *rotor {
	t.Helper()
	bin := rotorBinary(t)
	dir := t.TempDir()
	r := &rotor{
		SOCKS: hostPort(freePort(t)),
		HTTP:  hostPort(freePort(t)),
		Admin: hostPort(freePort(t)),
	}
	if o.CooldownBase == "" {
		o.CooldownBase, o.CooldownMax = "30s", "60s"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "shutdown_grace = %q\n\n", "1s")
	fmt.Fprintf(&b, "[listen]\nsocks5 = %q\nhttp = %q\nadmin = %q\n\n", r.SOCKS, r.HTTP, r.Admin)
	fmt.Fprintf(&b, "[pool]\nstrategy = \"round-robin\"\nmax_attempts = 3\nwait_for_upstream = \"2s\"\n%s\n", o.PoolExtra)
	if o.ProbeURL != "" {
		fmt.Fprintf(&b, "[probe]\nurl = %q\nexpect_status = [200]\ntimeout = \"5s\"\n\n", o.ProbeURL)
	}
	// refused and timeout cool briefly: recovery is quick, and a real
	// upstream that is slow once on a loaded machine (dante's password check
	// has been seen to take 5s) comes back at the next probe.
	for _, class := range []string{"refused", "timeout"} {
		fmt.Fprintf(&b, "[cooldown.%s]\nbase = \"1s\"\nmax = \"2s\"\n\n", class)
	}
	for _, class := range []string{"auth_rejected", "upstream_error", "slow_body", "target_http_error"} {
		fmt.Fprintf(&b, "[cooldown.%s]\nbase = %q\nmax = %q\n\n", class, o.CooldownBase, o.CooldownMax)
	}
	fmt.Fprintf(&b, "[slow_body]\nfirst_byte = \"1s\"\nstall = \"1s\"\n\n")
	fmt.Fprintf(&b, "[target_http_error]\nstatuses = [403, 429, 503]\n\n")
	b.WriteString(o.Extra)
	for _, u := range o.Upstreams {
		fmt.Fprintf(&b, "\n[[upstream]]\nname = %q\nurl = %q\n", u.Name, u.URL)
		if u.Pipeline {
			b.WriteString("pipeline = true\n")
		}
	}
	r.Config = filepath.Join(dir, "rotor.toml")
	if err := os.WriteFile(r.Config, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	r.p = startProc(t, "rotor", dir, bin, "-config", r.Config, "-log-format", "console")
	t.Cleanup(func() {
		// CONTRACT: SIGTERM drains and exits 0 (shutdown_grace is 1s here).
		// TestShutdown asserts it; here it is only worth a note.
		r.p.stop()
		if err := r.p.waitErr(); err != nil {
			t.Logf("note: rotor did not exit 0 on SIGTERM: %v", err)
		}
	})
	for _, a := range []string{r.SOCKS, r.HTTP, r.Admin} {
		waitAccept(t, r.p, a, 10*time.Second)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rotor config:\n%s", b.String())
		}
	})
	if !o.NoWait {
		for _, u := range o.Upstreams {
			r.waitRecord(t, u.Name, 20*time.Second, "eligible after rotor's first probe", func(rec record) bool {
				return rec.State == "eligible"
			})
		}
	}
	return r
}

// record is one entry of GET /api/upstreams (CONTRACT.md).
type record struct {
	Name      string         `json:"name"`
	URL       string         `json:"url"`
	State     string         `json:"state"`
	Reason    string         `json:"reason"`
	Stage     string         `json:"stage"`
	Until     *string        `json:"until"`
	Failures  map[string]int `json:"failures"`
	Successes int            `json:"successes"`
	Active    int            `json:"active"`
	History   []transition   `json:"history"`
	Targets   []struct {
		Host   string `json:"host"`
		Reason string `json:"reason"`
		Stage  string `json:"stage"`
	} `json:"targets"`
}

type transition struct {
	At     string `json:"at"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
	Stage  string `json:"stage"`
	Detail string `json:"detail"`
	Target string `json:"target"` // set on a per-target cooldown entry
}

func (r record) String() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// upstreams reads GET /api/upstreams.
func (r *rotor) upstreams(t *testing.T) []record {
	t.Helper()
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + r.Admin + "/api/upstreams")
	if err != nil {
		t.Fatalf("GET /api/upstreams: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/upstreams: %s: %s", resp.Status, body)
	}
	var recs []record
	if err := json.Unmarshal(body, &recs); err != nil {
		t.Fatalf("GET /api/upstreams: %v: %s", err, body)
	}
	return recs
}

// upstream returns the record named name.
func (r *rotor) upstream(t *testing.T, name string) record {
	t.Helper()
	for _, rec := range r.upstreams(t) {
		if rec.Name == name {
			return rec
		}
	}
	t.Fatalf("/api/upstreams has no record named %q", name)
	return record{}
}

// waitRecord polls the record named name until ok accepts it.
func (r *rotor) waitRecord(t *testing.T, name string, within time.Duration, what string, ok func(record) bool) record {
	t.Helper()
	deadline := time.Now().Add(within)
	var last record
	for {
		last = r.upstream(t, name)
		if ok(last) {
			return last
		}
		if time.Now().After(deadline) {
			t.Fatalf("upstream %s: want %s within %v; last record: %s", name, what, within, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cooledFor reports whether rec is (or was) cooled for reason at stage ("" =
// any): the current record, a transition in its history, or a per-target
// cooldown (the default scope of target_http_error is the target host).
func cooledFor(rec record, reason, stage string) bool {
	if rec.State != "eligible" && rec.Reason == reason && (stage == "" || rec.Stage == stage) {
		return true
	}
	for _, h := range rec.History {
		if (h.To == "cooling" || h.Target != "") && h.Reason == reason && (stage == "" || h.Stage == stage) {
			return true
		}
	}
	for _, tg := range rec.Targets {
		if tg.Reason == reason && (stage == "" || tg.Stage == stage) {
			return true
		}
	}
	return false
}

// everCooled reports whether rec is or was cooled for any reason.
func everCooled(rec record) bool {
	if rec.State == "cooling" || rec.State == "probe_allowed" {
		return true
	}
	for _, h := range rec.History {
		if h.To == "cooling" || h.Target != "" {
			return true
		}
	}
	return len(rec.Targets) > 0
}

// ---- small clients --------------------------------------------------------

// run runs a client command with a timeout and returns its stdout, stderr
// and error.
func run(t *testing.T, timeout time.Duration, env []string, argv ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		// Helpers the client left behind (Chromium's zygote and renderers)
		// are in its process group, which is ours.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	return stdout.String(), stderr.String(), err
}

// socksReply is what a raw SOCKS5 exchange saw.
type socksReply struct {
	Method   byte // server's method choice
	AuthVer  byte // RFC 1929 reply version (0 when no auth ran)
	Auth     int  // RFC 1929 status, -1 when no auth ran
	Rep      int  // CONNECT reply code, -1 when no reply
	BindAddr string
	Err      error // I/O error after the last byte read, if any
}

// socksConnect performs a raw SOCKS5 exchange offering methods, with
// user/pass when the server selects 02, and CONNECT to target (IPv4 literal).
// It returns the open connection when the CONNECT succeeded.
func socksConnect(proxyAddr string, methods []byte, user, pass, target string) (socksReply, net.Conn) {
	rep := socksReply{Auth: -1, Rep: -1}
	c, err := net.DialTimeout("tcp", proxyAddr, 3*time.Second)
	if err != nil {
		rep.Err = err
		return rep, nil
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	fail := func(err error) (socksReply, net.Conn) {
		rep.Err = err
		c.Close()
		return rep, nil
	}
	if _, err := c.Write(append([]byte{5, byte(len(methods))}, methods...)); err != nil {
		return fail(err)
	}
	var mr [2]byte
	if _, err := io.ReadFull(br, mr[:]); err != nil {
		return fail(err)
	}
	rep.Method = mr[1]
	switch mr[1] {
	case 0x00:
	case 0x02:
		msg := []byte{1, byte(len(user))}
		msg = append(msg, user...)
		msg = append(msg, byte(len(pass)))
		msg = append(msg, pass...)
		if _, err := c.Write(msg); err != nil {
			return fail(err)
		}
		var ar [2]byte
		if _, err := io.ReadFull(br, ar[:]); err != nil {
			return fail(err)
		}
		rep.AuthVer, rep.Auth = ar[0], int(ar[1])
		if ar[1] != 0 {
			// See whether the server closes after a rejection.
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err := br.ReadByte()
			return fail(err)
		}
	default:
		return fail(nil)
	}
	host, portStr, _ := net.SplitHostPort(target)
	ip := net.ParseIP(host).To4()
	var port int
	fmt.Sscan(portStr, &port)
	req := []byte{5, 1, 0, 1}
	req = append(req, ip...)
	req = append(req, byte(port>>8), byte(port))
	if _, err := c.Write(req); err != nil {
		return fail(err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return fail(err)
	}
	rep.Rep = int(hdr[1])
	var addr []byte
	switch hdr[3] {
	case 1:
		addr = make([]byte, 4+2)
	case 4:
		addr = make([]byte, 16+2)
	case 3:
		l, err := br.ReadByte()
		if err != nil {
			return fail(err)
		}
		addr = make([]byte, int(l)+2)
	}
	if _, err := io.ReadFull(br, addr); err != nil {
		return fail(err)
	}
	p := int(addr[len(addr)-2])<<8 | int(addr[len(addr)-1])
	if hdr[3] == 3 {
		rep.BindAddr = net.JoinHostPort(string(addr[:len(addr)-2]), fmt.Sprint(p))
	} else {
		rep.BindAddr = net.JoinHostPort(net.IP(addr[:len(addr)-2]).String(), fmt.Sprint(p))
	}
	if rep.Rep != 0 {
		return fail(nil)
	}
	_ = c.SetDeadline(time.Time{})
	return rep, &bufConn{Conn: c, r: br}
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

// httpProxyResult is one raw exchange with an HTTP proxy.
type httpProxyResult struct {
	Resp *http.Response
	Body string
	Conn net.Conn
	BR   *bufio.Reader
}

// proxyRequest sends raw (a full request) to an HTTP proxy and reads one
// response; method is the request method (CONNECT responses carry no body).
func proxyRequest(t *testing.T, proxyAddr, method, raw string) httpProxyResult {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxyAddr, 3*time.Second)
	if err != nil {
		t.Fatalf("dial proxy %s: %v", proxyAddr, err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatalf("write to proxy: %v", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read proxy response to %s: %v", method, err)
	}
	res := httpProxyResult{Resp: resp, Conn: c, BR: br}
	if method != http.MethodConnect || resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		res.Body = string(b)
	}
	return res
}

// basicAuth returns a Proxy-Authorization header line (with CRLF) or "".
func basicAuth(header, user, pass string) string {
	if user == "" {
		return ""
	}
	return header + ": Basic " + b64(user+":"+pass) + "\r\n"
}

// bufioReader returns r as a *bufio.Reader, wrapping it when needed.
func bufioReader(r io.Reader) *bufio.Reader {
	if br, ok := r.(*bufio.Reader); ok {
		return br
	}
	return bufio.NewReader(r)
}
