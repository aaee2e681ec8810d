package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

func TestMetricsExposition(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"refused"}`)
	f.do(t, "POST", "/api/upstreams/bob@127.0.0.1:2/disable", "")
	m := f.srv.metrics
	m.tunnelStart("socks5")
	m.tunnelStart("socks5")
	m.tunnelEnd("socks5")
	m.tunnelDone("socks5", "ok")
	m.tunnelDone("http", "unavailable")
	m.bytes(100, 2000)
	m.dialLatency(30 * time.Millisecond)
	observer{m}.Probe("dc-1", false, 2*time.Second)

	code, hdr, body := f.do(t, "GET", "/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d", code)
	}
	if ct := hdr.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q", ct)
	}
	for _, want := range []string{
		`rotor_upstreams{state="eligible"} 0`,
		`rotor_upstreams{state="cooling"} 1`,
		`rotor_upstreams{state="probe_allowed"} 0`,
		`rotor_upstreams{state="disabled"} 1`,
		`rotor_upstream_failures_total{class="refused",stage="dial",upstream="dc-1"} 1`,
		`rotor_failures_total{class="refused",stage="dial"} 1`,
		`rotor_probes_total{result="ok",upstream="dc-1"} 0`,
		`rotor_probes_total{result="failed",upstream="bob@127.0.0.1:2"} 0`,
		`rotor_tunnels_active{front="socks5"} 1`,
		`rotor_tunnels_active{front="http"} 0`,
		`rotor_tunnels_total{front="socks5",outcome="ok"} 1`,
		`rotor_tunnels_total{front="http",outcome="unavailable"} 1`,
		`rotor_bytes_total{direction="up"} 100`,
		`rotor_bytes_total{direction="down"} 2000`,
		`rotor_waiting_clients 0`,
		`rotor_dial_seconds_bucket{le="0.05"} 1`,
		`rotor_dial_seconds_count 1`,
		`rotor_probe_seconds_count{result="failed"} 1`,
		`rotor_probe_seconds_count{result="ok"} 0`,
		`rotor_transitions_total{from="eligible",to="cooling"} 1`,
		`rotor_transitions_total{from="eligible",to="disabled"} 1`,
		`rotor_upstream_state{state="cooling",upstream="dc-1"} 1`,
		`rotor_upstream_state{state="eligible",upstream="dc-1"} 0`,
		`rotor_upstream_successes_total{upstream="dc-1"} 0`,
		`rotor_upstream_active{upstream="dc-1"} 0`,
		`rotor_tunnels_open 0`,
		`rotor_log_lines_dropped_total 0`, // no Options.LogDropped
		"# TYPE rotor_log_lines_dropped_total counter",
		"# TYPE rotor_upstream_failures_total counter",
		"# TYPE rotor_upstreams gauge",
		"go_goroutines ",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want) {
			t.Errorf("exposition lacks %s", want)
		}
	}
	if strings.Contains(body, canary) || strings.Contains(body, "alice") {
		t.Errorf("exposition carries credentials")
	}
}

// TestMetricsPerUpstreamLimit: a pool larger than metrics.per_upstream_limit
// keeps the pool-wide series and drops the per-upstream ones (ten per
// upstream), with a warning; a reload that brings the pool back within the
// limit brings them back, and 0 means no limit.
func TestMetricsPerUpstreamLimit(t *testing.T) {
	limited := strings.Replace(adminConfig, "[pool]\n", "[metrics]\nper_upstream_limit = 1\n\n[pool]\n", 1)
	f := newAdminFixture(t, limited, fixedClock())
	f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"refused"}`)
	f.do(t, "POST", "/api/upstreams/bob@127.0.0.1:2/report", `{"class":"refused"}`)
	_, _, body := f.do(t, "GET", "/metrics", "")
	for _, want := range []string{`rotor_upstreams{state="cooling"} 2`, `rotor_failures_total{class="refused",stage="dial"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("over the limit: exposition lacks %s", want)
		}
	}
	if strings.Contains(body, `upstream="`) {
		t.Errorf("over the limit: per-upstream series are exposed")
	}
	if !strings.Contains(f.logs.String(), "per-upstream metrics are off") {
		t.Errorf("no warning that per-upstream metrics are off")
	}

	for _, text := range []string{
		strings.Replace(limited, "per_upstream_limit = 1", "per_upstream_limit = 2", 1),
		strings.Replace(limited, "per_upstream_limit = 1", "per_upstream_limit = 0", 1),
	} {
		cfg, err := ParseConfig("admin_test.toml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.srv.Reload(cfg); err != nil {
			t.Fatal(err)
		}
		_, _, body = f.do(t, "GET", "/metrics", "")
		if !strings.Contains(body, `rotor_upstream_failures_total{class="refused",stage="dial",upstream="dc-1"} 1`) {
			t.Errorf("within the limit (%s): per-upstream series missing", text[strings.Index(text, "per_upstream_limit"):][:22])
		}
	}
	if !strings.Contains(f.logs.String(), "per-upstream metrics are on again") {
		t.Errorf("no note that per-upstream metrics are back")
	}
	if _, err := ParseConfig("bad.toml", []byte("[metrics]\nper_upstream_limit = -5\n")); err == nil ||
		!strings.Contains(err.Error(), "bad.toml:2: metrics.per_upstream_limit: must not be negative") {
		t.Errorf("negative limit: %v", err)
	}
}

// TestMetricsLint runs Prometheus' own naming and help lint over rotor's
// metrics.
func TestMetricsLint(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	f.do(t, "POST", "/api/upstreams/dc-1/report", `{"class":"refused"}`)
	f.srv.metrics.dialLatency(time.Millisecond)
	mfs, err := f.srv.metrics.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "rotor_") {
			t.Errorf("lint %s: %s", p.Metric, p.Text)
		}
	}
}

// TestMetricsRegistryPerServer: two Servers in one process each have
// their own registry (no global default registry, no duplicate
// registration panic) and count separately.
func TestMetricsRegistryPerServer(t *testing.T) {
	a := newAdminFixture(t, adminConfig, fixedClock())
	b := newAdminFixture(t, adminConfig, fixedClock())
	a.srv.metrics.bytes(5, 0)
	_, _, body := b.do(t, "GET", "/metrics", "")
	if !strings.Contains(body, `rotor_bytes_total{direction="up"} 0`) {
		t.Errorf("second server sees the first one's bytes")
	}
}

// TestSOCKS5ClientAuthCounted: missing or wrong SOCKS5 credentials were
// counted as outcome handshake_error, while the HTTP front counts its 407
// as client_auth. Both fronts count them as client_auth now; a broken
// handshake is still handshake_error.
func TestSOCKS5ClientAuthCounted(t *testing.T) {
	srv, _ := startGateway(t, "[[client]]\nusername = \"scraper\"\npassword = \"s3cret\"\n[[upstream]]\nurl = \"direct://\"\n")
	front := srv.Addr("socks5")
	if _, err := socksAsk(t, front, socksHello("scraper", "wrong", "example.com:80")); err == nil {
		t.Error("wrong password: the handshake went through")
	}
	if rep, err := socksAsk(t, front, socksHello("", "", "example.com:80")); err != nil || rep != 0xFF {
		t.Errorf("no credentials: %#x %v, want method 0xFF", rep, err)
	}
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte{4, 1, 0, 80, 127, 0, 0, 1, 0}) // SOCKS4
	_, _ = io.Copy(io.Discard, c)                        // until rotor closes it
	c.Close()
	count := func(outcome string) float64 {
		resp, err := http.Get("http://" + srv.Addr("admin") + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var n float64
		_, _ = fmt.Sscan(strings.TrimPrefix(regexp.MustCompile(`(?m)^rotor_tunnels_total\{front="socks5",outcome="`+outcome+`"\} .*$`).FindString(string(body)),
			`rotor_tunnels_total{front="socks5",outcome="`+outcome+`"} `), &n)
		return n
	}
	eventuallyTrue(t, "three failed handshakes counted", func() bool { return count("client_auth")+count("handshake_error") == 3 })
	if got, want := count("client_auth"), 2.0; got != want {
		t.Errorf(`rotor_tunnels_total{front="socks5",outcome="client_auth"} = %v, want %v`, got, want)
	}
	if got, want := count("handshake_error"), 1.0; got != want {
		t.Errorf(`rotor_tunnels_total{front="socks5",outcome="handshake_error"} = %v, want %v`, got, want)
	}
}

// countingConn counts the bytes read from its Conn.
type countingConn struct {
	net.Conn
	n int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n += int64(n)
	return n, err
}

// TestForwardBytesCounted: forwarded plain-HTTP requests count in
// rotor_bytes_total as their bytes crossed the client's socket, heads and
// bodies, both ways (bug: "up" never counted them, and "down" counted only
// the answer's body), as a tunnel's bytes are counted.
func TestForwardBytesCounted(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		for {
			head, err := rt.readHead(br)
			if err != nil {
				return
			}
			if strings.HasPrefix(head, "POST") {
				_, _ = io.CopyN(io.Discard, br, 1000)
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 500\r\n\r\n"+strings.Repeat("d", 500)); err != nil {
				return
			}
		}
	})
	srv := directGateway(t)
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cc := &countingConn{Conn: c}
	br := bufio.NewReader(cc)
	reqs := []string{
		fmt.Sprintf("GET http://%s/a HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr()),
		fmt.Sprintf("POST http://%s/b HTTP/1.1\r\nHost: %s\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n%s", rt.Addr(), rt.Addr(), strings.Repeat("u", 1000)),
	}
	var up int64
	for _, r := range reqs {
		if _, err := io.WriteString(c, r); err != nil {
			t.Fatal(err)
		}
		up += int64(len(r))
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("answer: %v %v", statusOf(resp), err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	_, _ = io.Copy(io.Discard, br) // to the close
	counted := func(dir string) int64 {
		var m dto.Metric
		if err := srv.metrics.bytesTotal.WithLabelValues(dir).Write(&m); err != nil {
			t.Fatal(err)
		}
		return int64(m.GetCounter().GetValue())
	}
	eventuallyTrue(t, "both requests counted", func() bool { return counted("up") == up && counted("down") == cc.n })
}

// TestHTTPBadHeadsCounted: a request head the HTTP front refuses (400,
// 431, 505) counts as outcome handshake_error, as a malformed SOCKS5
// handshake does (bug: they were counted nowhere, so a client sending
// garbage to the HTTP port did not show in rotor_tunnels_total).
func TestHTTPBadHeadsCounted(t *testing.T) {
	srv := directGateway(t)
	for _, head := range []string{
		"GARBAGE\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: x\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
		"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX: " + strings.Repeat("a", 80<<10) + "\r\n\r\n",
	} {
		c, err := net.Dial("tcp", srv.Addr("http"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.WriteString(c, head)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil || resp.StatusCode < 400 {
			t.Fatalf("%.20q: %v %v, want a 4xx/5xx", head, statusOf(resp), err)
		}
	}
	var m dto.Metric
	if err := srv.metrics.tunnelsTotal.WithLabelValues("http", "handshake_error").Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 4 {
		t.Errorf(`rotor_tunnels_total{front="http",outcome="handshake_error"} = %v, want 4`, got)
	}
}
