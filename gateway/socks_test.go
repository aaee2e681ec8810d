package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

func TestValidTargetHost(t *testing.T) {
	tests := []struct {
		host string
		want bool
	}{
		{"example.com", true},
		{"example.com.", true},
		{"localhost", true},
		{"a", true},
		{"xn--bcher-kva.example", true},
		{"_dmarc.example.com", true},
		{"my-host_1.EXAMPLE.org", true},
		{"127.0.0.1", true},
		{"1.2.3", false},           // inet_aton reads 1.2.0.3: not a DNS name
		{"127.1", false},           // 127.0.0.1 to getaddrinfo and squid
		{"2130706433", false},      // 127.0.0.1 too
		{"0x7f000001", false},      // and this
		{"127.000.000.001", false}, // and this
		{"example.123", false},     // no top-level domain is all-numeric
		{"1.2.3.4.5", false},       // ends in a number, no address
		{"1a.example", true},       // a label may start with a digit
		{"123.example", true},      // or be all digits, except the last
		{"0xcafe.example", true},
		{"example.0xg", true}, // not a number
		{"::1", true},
		{"2001:db8::1", true},
		{strings.Repeat("a", 63) + ".com", true},
		{strings.Repeat("a.", 126) + "a", true},        // 253 bytes
		{strings.Repeat("a.", 126) + "a.", true},       // 253 + the root dot
		{"", false},                                    // empty ATYP 3 name
		{".", false},                                   // the root alone
		{"127.0.0.1\r\n\r\n", false},                   // ends the CONNECT head early
		{"x y", false},                                 // splits the request line
		{"a\x00b", false},                              // NUL
		{"a\tb", false},                                // tab
		{"host\r\nX-Injected: 1", false},               // header injection
		{"a..b", false},                                // empty label
		{".a", false},                                  // empty first label
		{strings.Repeat("a", 64) + ".com", false},      // label of 64
		{strings.Repeat("a.", 127) + "a", false},       // 255 bytes
		{strings.Repeat("a.", 126) + "ab", false},      // 254 bytes
		{"a/b", false},                                 // path
		{"a@b", false},                                 // userinfo
		{"a:b", false},                                 // not an IPv6 literal
		{"[::1]", false},                               // brackets belong to host:port
		{"fe80::1%eth0", false},                        // zones are local to rotor's host
		{"ex%41mple.com", false},                       // percent-encoding
		{"例え.jp", false},                               // IDNs travel as punycode
		{"a\xffb", false},                              // not UTF-8
		{"host,other", false},                          // list separator
		{"1.2.3.4\r\nProxy-Authorization: x", false},   // after an IP
		{"2001:db8::1\r\n", false},                     // after an IPv6
		{strings.Repeat("a", 254), false},              // one long label
		{strings.Repeat("1", 3) + "." + "\x7f", false}, // DEL
	}
	for _, tt := range tests {
		t.Run(strconv.Quote(tt.host), func(t *testing.T) {
			if got := validTargetHost(tt.host); got != tt.want {
				t.Errorf("validTargetHost(%q) = %v, want %v", tt.host, got, tt.want)
			}
		})
	}
}

// socksRequest sends a no-auth greeting and a CONNECT with ATYP 3 name
// (sent verbatim, whatever it holds) in one write.
func socksRequest(t *testing.T, front, name string, port int) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(name))}
	b = append(b, name...)
	b = append(b, byte(port>>8), byte(port))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSOCKSInvalidNameTouchesNoUpstream: a SOCKS5 domain name that is not a
// DNS name or an IP literal (CR/LF, space, NUL...) is answered 0x04 at
// once and the connection closed; no upstream is dialled and health hears
// nothing, so a client cannot cool the HTTP upstreams by smuggling bytes
// into the CONNECT request rotor writes to them.
func TestSOCKSInvalidNameTouchesNoUpstream(t *testing.T) {
	upstreamtest.CheckGoroutines(t)
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Username: "u", Password: "p"})
	u := up.URL()
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), u.String()))
	_, portStr, _ := net.SplitHostPort(target.Addr())
	port, _ := strconv.Atoi(portStr)
	names := []string{
		"127.0.0.1\r\n\r\n",
		"x y",
		"a\x00b",
		"",
		"host\r\nProxy-Authorization: Basic eDp5",
		strings.Repeat("a", 64) + ".example",
		"[::1]",
		"a:b",
	}
	for _, name := range names {
		t.Run(strconv.Quote(name), func(t *testing.T) {
			c := socksRequest(t, srv.Addr("socks5"), name, port)
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil {
				t.Fatalf("server did not answer and close within 2s: %v (read %x)", err, got)
			}
			if len(got) != 2+10 || got[0] != 5 || got[1] != 0 || got[2] != 5 || got[3] != repHostUnreachable {
				t.Fatalf("answer %x, want method 00 then reply 0x04", got)
			}
		})
	}
	if n := up.Connections(); n != 0 {
		t.Errorf("the upstream got %d connections for invalid names, want 0", n)
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	if snap.State != health.Eligible || len(snap.Counts) != 0 || snap.Successes != 0 {
		t.Errorf("upstream record after invalid names: state %v, failures %v, successes %d; want eligible and untouched",
			snap.State, snap.Counts, snap.Successes)
	}
	// A valid name still goes through the same upstream.
	if rep := socksConnect(t, srv.Addr("socks5"), target.Addr()); rep != repSuccess {
		t.Errorf("valid name: reply %#x, want success", rep)
	}
}

// TestSOCKSClientGoneWhileDialling: a client that leaves while rotor dials
// (the upstream accepted the CONNECT and never answers) ends the dial at
// once, and the upstream is neither failed nor credited.
func TestSOCKSClientGoneWhileDialling(t *testing.T) {
	upstreamtest.CheckGoroutines(t)
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}})
	srv, logs := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nhandshake_timeout = \"8s\"\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), up.URL().String()))
	e := srv.Pool().Lookup("up")
	c := socksRequest(t, srv.Addr("socks5"), "10.255.255.1", 443)
	eventually(t, "dial started", func() bool { return e.Active() == 1 })
	time.Sleep(300 * time.Millisecond)
	left := time.Now()
	c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for e.Active() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the dial still runs %v after the client left", time.Since(left))
		}
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, "tunnel line", func() bool { return strings.Contains(logs.String(), `"tunnel closed"`) })
	snap := srv.Tracker().Snapshot(e.Record())
	if snap.State != health.Eligible || len(snap.Counts) != 0 || snap.Successes != 0 {
		t.Errorf("after a departed client: state %v, failures %v, successes %d; want eligible, no outcome",
			snap.State, snap.Counts, snap.Successes)
	}
	// Logged and counted as the client's leaving, not as a failure.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"tunnel closed"`) && (!strings.Contains(line, `"outcome":"client_gone"`) || !strings.Contains(line, `"level":"info"`)) {
			t.Errorf("tunnel line %s, want outcome client_gone at info", line)
		}
	}
}

// TestSOCKSClientGoneWhileWaiting: a client that leaves while rotor waits
// for an eligible upstream stops waiting at once instead of holding its
// goroutine and socket for pool.wait_for_upstream.
func TestSOCKSClientGoneWhileWaiting(t *testing.T) {
	upstreamtest.CheckGoroutines(t)
	srv, _ := startGateway(t, "[pool]\nwait_for_upstream = \"20s\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:9\"\nname = \"off\"\ndisabled = true\n")
	c := socksRequest(t, srv.Addr("socks5"), "example.com", 443)
	eventually(t, "client waiting", func() bool { return srv.Pool().Waiting() == 1 })
	time.Sleep(300 * time.Millisecond)
	left := time.Now()
	c.Close()
	deadline := time.Now().Add(2 * time.Second)
	for srv.Pool().Waiting() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the departed client still waits %v after it left", time.Since(left))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSOCKSWaitingClientKeepsPipelinedData: the client watch only peeks.
// A client that sends data after its CONNECT while rotor waits for a free
// upstream slot is not taken for gone, and its data reaches the target.
func TestSOCKSWaitingClientKeepsPipelinedData(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv, _ := startGateway(t, fmt.Sprintf("allow_private_destinations = true\n%s\n[pool]\nstart_eligible = true\nwait_for_upstream = \"10s\"\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\nmax_conns = 1\n",
		probeConf(target)))
	holder, _ := rawSOCKS(t, srv.Addr("socks5"), target.Addr(), nil) // takes the only slot
	c := socksRequest(t, srv.Addr("socks5"), "127.0.0.1", mustPort(t, target.Addr()))
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	eventually(t, "client waiting", func() bool { return srv.Pool().Waiting() == 1 })
	// Sent after go-socks5 parsed the request: it stays in the socket,
	// where the watch sees it on every check.
	if _, err := io.WriteString(c, "GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if srv.Pool().Waiting() != 1 {
		t.Fatal("a client with queued data was taken for gone")
	}
	holder.Close()
	br := bufio.NewReader(c)
	head := make([]byte, 2+10)
	if _, err := io.ReadFull(br, head); err != nil || head[3] != repSuccess {
		t.Fatalf("reply %x: %v", head, err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the data sent while waiting was lost: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("status %d", resp.StatusCode)
	}
}

func mustPort(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSOCKSSplitGreetingSelectsUserPass: with no [[client]], the method
// choice does not depend on how the greeting is cut into TCP segments: a
// client offering no-auth and username/password gets username/password
// however it writes the greeting, so its -tag- parameters apply.
func TestSOCKSSplitGreetingSelectsUserPass(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	ups := map[string]*upstreamtest.Server{
		"us": upstreamtest.NewSOCKS5(t, upstreamtest.Options{}),
		"de": upstreamtest.NewSOCKS5(t, upstreamtest.Options{}),
	}
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n%s", probeConf(target),
		upstreamConf([]string{"us", "de"}, ups, map[string]string{"us": `tags = ["us"]`, "de": `tags = ["de"]`})))
	greeting := []byte{5, 2, 0, 2}
	for cut := 0; cut < len(greeting); cut++ {
		t.Run(fmt.Sprintf("cut at %d", cut), func(t *testing.T) {
			before := tunnelCounts(ups)
			c, err := net.DialTimeout("tcp", srv.Addr("socks5"), 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			c.(*net.TCPConn).SetNoDelay(true)
			if cut > 0 {
				if _, err := c.Write(greeting[:cut]); err != nil {
					t.Fatal(err)
				}
				time.Sleep(50 * time.Millisecond) // a segment of its own, read on its own
			}
			if _, err := c.Write(greeting[cut:]); err != nil {
				t.Fatal(err)
			}
			sel := make([]byte, 2)
			if _, err := io.ReadFull(c, sel); err != nil {
				t.Fatal(err)
			}
			if sel[1] != 2 {
				t.Fatalf("method %#x, want 0x02 (username/password)", sel[1])
			}
			rest := socksHello("scraper-tag-us", "x", target.Addr())[3:]
			if _, err := c.Write(rest); err != nil {
				t.Fatal(err)
			}
			reply := make([]byte, 2+10)
			if _, err := io.ReadFull(c, reply); err != nil || reply[1] != 0 || reply[3] != repSuccess {
				t.Fatalf("auth + reply %x: %v", reply, err)
			}
			c.Close()
			eventually(t, "tunnel counted", func() bool { return len(tunnelDeltas(ups, before)) > 0 })
			if d := tunnelDeltas(ups, before); d["us"] != 1 || d["de"] != 0 {
				t.Errorf("tunnels per upstream %v, want one through \"us\"", d)
			}
		})
	}
}
