package gateway

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// socksRequestRaw sends a no-auth greeting and a CONNECT request with
// address type atyp and address bytes addr (RFC 1928 section 4) for port,
// and returns the connection.
func socksRequestRaw(t *testing.T, front string, atyp byte, addr []byte, port int) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	b := []byte{5, 1, 0, 5, 1, 0, atyp}
	if atyp == 3 {
		b = append(b, byte(len(addr)))
	}
	b = append(b, addr...)
	b = append(b, byte(port>>8), byte(port))
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSOCKSPortZeroIsInvalidTarget: a SOCKS5 CONNECT to port 0, whatever
// the address type, is refused with REP 0x04 before any upstream is
// picked and logged as the HTTP front logs the same target: outcome
// failed at info, "invalid target: the port must be a number from 1 to
// 65535", no class or stage. Issue: it went on to the pool and its line
// read `"class":"target_unreachable","stage":"target_connect","error":
// "target_connect: target_unreachable: invalid target address: ...port
// must be 1-65535"`, a target failure README's table says it is not.
func TestSOCKSPortZeroIsInvalidTarget(t *testing.T) {
	upstreamtest.CheckGoroutines(t)
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, logs := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"up\"\n",
		probeConf(target), up.URL().String()))
	cases := []struct {
		name   string
		atyp   byte
		addr   []byte
		target string
	}{
		{"ipv4", 1, []byte{127, 0, 0, 1}, "127.0.0.1:0"},
		{"name", 3, []byte("localhost"), "localhost:0"},
		{"ipv6", 4, net.IPv6loopback, "[::1]:0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := socksRequestRaw(t, srv.Addr("socks5"), tc.atyp, tc.addr, 0)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil || len(got) != 2+10 || got[3] != repHostUnreachable {
				t.Fatalf("answer %x (err %v), want method 00 then REP 0x04", got, err)
			}
		})
	}
	lines := make(map[string]string)
	for deadline := time.Now().Add(10 * time.Second); len(lines) < len(cases) && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, l := range summaryLines(logs) {
			for _, tc := range cases {
				if strings.Contains(l, `"target":"`+tc.target+`"`) {
					lines[tc.target] = l
				}
			}
		}
	}
	for _, tc := range cases {
		l, ok := lines[tc.target]
		if !ok {
			t.Errorf("%s: no summary line for %s:\n%s", tc.name, tc.target, logs)
			continue
		}
		for _, want := range []string{`"level":"info"`, `"outcome":"failed"`, `"error":"invalid target: the port must be a number from 1 to 65535"`} {
			if !strings.Contains(l, want) {
				t.Errorf("%s: line without %s: %s", tc.name, want, l)
			}
		}
		if strings.Contains(l, `"class"`) || strings.Contains(l, `"stage"`) {
			t.Errorf("%s: a refusal before any upstream logged with a class or stage: %s", tc.name, l)
		}
	}
	if n := up.Connections(); n != 0 {
		t.Errorf("the upstream got %d connections for port 0, want 0", n)
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	if snap.State != health.Eligible || len(snap.Counts) != 0 || len(snap.History) != 0 {
		t.Errorf("upstream record after port 0: state %v, failures %v, history %+v; want eligible and untouched", snap.State, snap.Counts, snap.History)
	}
}
