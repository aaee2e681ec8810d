package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

func TestParseIPv4Shorthand(t *testing.T) {
	tests := []struct {
		host string
		want string // "" when it is no inet_aton address
	}{
		{"127.0.0.1", "127.0.0.1"},
		{"127.1", "127.0.0.1"},
		{"127.0.1", "127.0.0.1"},
		{"10.1", "10.0.0.1"},
		{"2130706433", "127.0.0.1"},
		{"0x7f000001", "127.0.0.1"},
		{"0X7F000001", "127.0.0.1"},
		{"017700000001", "127.0.0.1"},
		{"0177.0.0.1", "127.0.0.1"},
		{"0x7f.1", "127.0.0.1"},
		{"127.000.000.001", "127.0.0.1"},
		{"127.1.", "127.0.0.1"},
		{"0", "0.0.0.0"},
		{"0x", "0.0.0.0"},
		{"255.255.255.255", "255.255.255.255"},
		{"4294967295", "255.255.255.255"},
		{"1.16777215", "1.255.255.255"},
		{"1.2.65535", "1.2.255.255"},
		{"4294967296", ""},              // past 32 bits
		{"1.16777216", ""},              // the last part overflows its 3 bytes
		{"1.2.65536", ""},               // ... its 2 bytes
		{"256.1", ""},                   // a leading part over 255
		{"1.2.3.256", ""},               // the last of four over 255
		{"1.2.3.4.5", ""},               // five parts
		{"08", ""},                      // not octal
		{"0x1g", ""},                    // not hex
		{"1..2", ""},                    // empty part
		{"", ""},                        //
		{"example.com", ""},             //
		{"99999999999999999999999", ""}, // no wrap-around
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			a, ok := parseIPv4Shorthand(tt.host)
			got := ""
			if ok {
				got = a.String()
			}
			if got != tt.want {
				t.Errorf("parseIPv4Shorthand(%q) = %q, want %q", tt.host, got, tt.want)
			}
		})
	}
}

// shorthandProxy is an HTTP upstream that reads target hosts as squid and
// getaddrinfo do (inet_aton: 127.1 is 127.0.0.1) and connects only to
// loopback. It counts what it was asked to reach.
type shorthandProxy struct {
	*upstreamtest.Server
	mu    sync.Mutex
	asked []string
}

func newShorthandProxy(t *testing.T) *shorthandProxy {
	p := &shorthandProxy{}
	p.Server = upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
		p.mu.Lock()
		p.asked = append(p.asked, addr)
		p.mu.Unlock()
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			a, ok := parseIPv4Shorthand(host)
			if !ok {
				return nil, fmt.Errorf("not an address: %q", host)
			}
			ip = a
		}
		if !ip.IsLoopback() {
			return nil, fmt.Errorf("the test proxy connects only to loopback, not %v", ip)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, net.JoinHostPort(ip.String(), port))
	}})
	return p
}

func (p *shorthandProxy) targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asked...)
}

// TestHardenIPv4ShorthandNeverReachesUpstream: a client that spells one of
// rotor's listeners in IPv4 shorthand (127.1, 2130706433, 0x7f000001,
// 127.000.000.001, 017700000001) is refused as rotor itself (SOCKS 0x02,
// HTTP 403), and any other host in shorthand, loopback or private (10.1),
// as no valid host (0x04 / 400): no upstream is asked for either. Issue:
// the self check used net.ParseIP, the host passed as a DNS name, and an
// upstream resolving it like squid opened the admin API (POST .../disable
// answered 200) and let CONNECT to the SOCKS port nest.
func TestHardenIPv4ShorthandNeverReachesUpstream(t *testing.T) {
	up := newShorthandProxy(t)
	other := newCountingListener(t)
	srv, logs := startGateway(t, listenConf("")+
		fmt.Sprintf("[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"1ms\"\n[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL().String()))
	shorthands := []string{"127.1", "127.0.1", "2130706433", "0x7f000001", "0X7F000001", "127.000.000.001", "017700000001", "0177.1", "127.1."}
	type target struct {
		addr     string
		rep      byte
		status   int
		selfPort bool
	}
	var targets []target
	for _, front := range []string{"socks5", "http", "admin"} {
		_, port, _ := net.SplitHostPort(srv.Addr(front))
		for _, h := range shorthands {
			targets = append(targets, target{h + ":" + port, repNotAllowed, http.StatusForbidden, true})
		}
	}
	_, otherPort, _ := net.SplitHostPort(other.ln.Addr().String())
	for _, h := range append(shorthands, "10.1", "0x0a000001", "192.168.1", "1.2.3.4.5", "08", "example.123") {
		targets = append(targets, target{h + ":" + otherPort, repHostUnreachable, http.StatusBadRequest, false})
	}
	for _, tt := range targets {
		t.Run(tt.addr, func(t *testing.T) {
			if rep, err := socksAsk(t, srv.Addr("socks5"), socksHello("", "", tt.addr)); err != nil || rep != tt.rep {
				t.Errorf("SOCKS CONNECT %s: rep %#x err %v, want %#x", tt.addr, rep, err, tt.rep)
			}
			resp, err := httpAsk(t, srv.Addr("http"), string(connectHello(tt.addr)))
			if err != nil || resp.StatusCode != tt.status {
				t.Errorf("HTTP CONNECT %s: %s err %v, want %d", tt.addr, statusOf(resp), err, tt.status)
			}
			path := "/"
			if tt.selfPort {
				path = "/api/upstreams/up/disable" // the tester's request: no token on loopback
			}
			req := "POST http://" + tt.addr + path + " HTTP/1.1\r\nHost: " + tt.addr + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
			resp, err = httpAsk(t, srv.Addr("http"), req)
			if err != nil || resp.StatusCode != tt.status {
				t.Errorf("forward POST http://%s%s: %s err %v, want %d", tt.addr, path, statusOf(resp), err, tt.status)
			}
			if tt.status == http.StatusBadRequest && resp != nil && !strings.Contains(bodyOf(resp), "invalid target") {
				t.Errorf("forward to %s: body %q, want it to say the target is invalid", tt.addr, bodyOf(resp))
			}
		})
	}
	if got := up.targets(); len(got) != 0 {
		t.Errorf("the upstream was asked for %q", got)
	}
	if n := other.accepted.Load(); n != 0 {
		t.Errorf("the loopback target was reached %d times", n)
	}
	if st := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record()).State; st == health.Disabled {
		t.Errorf("a client disabled the upstream through rotor's admin API")
	}
	if strings.Contains(logs.String(), `"outcome":"ok"`) {
		t.Errorf("a tunnel or request was served:\n%s", logs)
	}
}

// TestTargetHostProblemNamesShorthand: the 400 says what to send instead.
func TestTargetHostProblemNamesShorthand(t *testing.T) {
	for host, want := range map[string]string{
		"127.1":      "IPv4 shorthand; write it as 127.0.0.1",
		"0x0a000001": "IPv4 shorthand; write it as 10.0.0.1",
		"1.2.3.4.5":  "not a DNS name or an IP address",
		"example.1":  "not a DNS name or an IP address",
	} {
		if got := targetHostProblem(host); !strings.Contains(got, want) {
			t.Errorf("targetHostProblem(%s) = %q, want it to say %q", strconv.Quote(host), got, want)
		}
	}
}

// TestClientRefusalsLoggedAtInfo: targets refused before any upstream
// (rotor itself, port 0, a host that is no host) get their line at info,
// on both fronts: the client's doing, which a hostile client can repeat
// at will. Issue: each was a warning, written at once.
func TestClientRefusalsLoggedAtInfo(t *testing.T) {
	srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n")
	admin := srv.Addr("admin")
	for _, addr := range []string{admin, "127.0.0.1:0", "a b:80", "127.1:80"} {
		if rep, err := socksAsk(t, srv.Addr("socks5"), socksHello("", "", addr)); err != nil || rep == repSuccess {
			t.Errorf("SOCKS CONNECT %q: rep %#x err %v, want a refusal", addr, rep, err)
		}
	}
	for _, name := range []string{"[[::1]]", "[::1]"} { // ATYP 3 names as sent
		c := socksRequest(t, srv.Addr("socks5"), name, 80)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if b, _ := io.ReadAll(c); len(b) < 4 || b[3] != repHostUnreachable { // 05 00, then the reply
			t.Errorf("SOCKS CONNECT name %q: %x, want REP 0x04", name, b)
		}
	}
	for _, req := range []string{
		string(connectHello(admin)),
		string(connectHello("127.0.0.1:0")),
		"GET http://" + admin + "/ HTTP/1.1\r\nHost: " + admin + "\r\n\r\n",
		"GET http://127.0.0.1:0/ HTTP/1.1\r\nHost: 127.0.0.1:0\r\n\r\n",
		"GET http://0x7f000001/ HTTP/1.1\r\nHost: 0x7f000001\r\n\r\n",
	} {
		if resp, err := httpAsk(t, srv.Addr("http"), req); err != nil || resp.StatusCode < 400 {
			t.Errorf("%q: %s err %v, want a refusal", req, statusOf(resp), err)
		}
	}
	infoSummaryLines(t, logs, 4+2+5)
}

// TestSelfTargetByLocalNames: a target named by this machine's hostname,
// or by a name the hosts file gives a loopback address, at one of rotor's
// listener ports is rotor itself (bug: "vm:9090", vm being the hostname,
// reached the admin API through any proxy beside rotor, which resolves
// the name from the same hosts file). Other ports, and other names, are
// targets as before.
func TestSelfTargetByLocalNames(t *testing.T) {
	hosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hosts, []byte("127.0.0.1 localhost\n127.0.1.1 myalias.example MyOther # comment\n::1 six.example\n192.0.2.7 remote.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := hostsPath
	hostsPath = hosts
	t.Cleanup(func() { hostsPath = old })
	srv, _ := startGateway(t, "[[upstream]]\nurl = \"direct://\"\n")
	_, admin, _ := net.SplitHostPort(srv.Addr("admin"))
	hostname, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		self bool
	}{
		{"myalias.example:" + admin, true},
		{"MYALIAS.EXAMPLE.:" + admin, true},
		{"myother:" + admin, true},
		{"six.example:" + admin, true},
		{hostname + ":" + admin, true},
		{"remote.example:" + admin, false},
		{"elsewhere.example:" + admin, false},
		{"myalias.example:1", false},
	} {
		if got := srv.selfTarget(tc.addr); got != tc.self {
			t.Errorf("selfTarget(%q) = %v, want %v", tc.addr, got, tc.self)
		}
	}
}

// infoSummaryLines waits for want summary lines (tunnel closed, request
// forwarded) in logs, and checks that there are exactly want, each at info.
func infoSummaryLines(t *testing.T, logs *logBuffer, want int) {
	t.Helper()
	var lines []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if lines = summaryLines(logs); len(lines) >= want {
			break
		}
	}
	if len(lines) != want {
		t.Fatalf("%d summary lines, want %d:\n%s", len(lines), want, logs)
	}
	for _, l := range lines {
		if !strings.Contains(l, `"level":"info"`) {
			t.Errorf("a refusal of the client's target not at info: %s", l)
		}
	}
}
