package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// Scraper controls end to end (issue 9): sessions and tags in the proxy
// username, and retry of banned plain-HTTP requests.

// upstreamConf renders [[upstream]] tables for the fakes, named after the
// map keys in order.
func upstreamConf(names []string, ups map[string]*upstreamtest.Server, extra map[string]string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "[[upstream]]\nurl = %q\nname = %q\n%s\n", ups[n].URL().String(), n, extra[n])
	}
	return b.String()
}

// tunnelDeltas returns how many tunnels each fake served since before.
func tunnelDeltas(ups map[string]*upstreamtest.Server, before map[string]int64) map[string]int64 {
	d := map[string]int64{}
	for n, u := range ups {
		if x := u.Tunnels() - before[n]; x > 0 {
			d[n] = x
		}
	}
	return d
}

func tunnelCounts(ups map[string]*upstreamtest.Server) map[string]int64 {
	m := map[string]int64{}
	for n, u := range ups {
		m[n] = u.Tunnels()
	}
	return m
}

func TestScraperSessionKeepsOneUpstream(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	names := []string{"a", "b", "c"}
	ups := map[string]*upstreamtest.Server{}
	for _, n := range names {
		ups[n] = upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	}
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nstrategy = \"round-robin\"\n%s",
		probeConf(target), upstreamConf(names, ups, nil)))

	t.Run("http", func(t *testing.T) {
		seen := map[string]int{}
		for i := 0; i < 6; i++ {
			for _, tunnel := range []bool{false, true} {
				resp, err := httpGet(t, srv.Addr("http"), "scraper-session-abc123", "x", target.URL("/ok"), tunnel)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("request %d (tunnel=%v): %v %v", i, tunnel, resp, err)
				}
				seen[resp.Header.Get("X-Rotor-Upstream")]++
			}
		}
		if len(seen) != 1 {
			t.Errorf("session served by %v, want one upstream", seen)
		}
		// Without a session the same client is spread.
		spread := map[string]int{}
		for i := 0; i < 6; i++ {
			resp, err := httpGet(t, srv.Addr("http"), "scraper", "x", target.URL("/ok"), false)
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("no session: %v %v", resp, err)
			}
			spread[resp.Header.Get("X-Rotor-Upstream")]++
		}
		if len(spread) < 2 {
			t.Errorf("requests without a session all went to %v", spread)
		}
	})
	t.Run("socks5", func(t *testing.T) {
		before := tunnelCounts(ups)
		for i := 0; i < 6; i++ {
			resp, err := socksGet(t, srv.Addr("socks5"), "scraper-session-s5", "x", target.URL("/ok"))
			if err != nil || resp.StatusCode != 200 {
				t.Fatalf("request %d: %v %v", i, resp, err)
			}
		}
		if d := tunnelDeltas(ups, before); len(d) != 1 {
			t.Errorf("session tunnels per upstream %v, want all 6 on one", d)
		}
	})
}

func TestScraperSessionRehomesAndStays(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	names := []string{"a", "b"}
	ups := map[string]*upstreamtest.Server{}
	for _, n := range names {
		ups[n] = upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	}
	srv, logs := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\n[cooldown.refused]\nbase = \"300ms\"\nmax = \"300ms\"\n%s",
		probeConf(target), upstreamConf(names, ups, nil)))
	get := func() string {
		t.Helper()
		// CONNECT: a new tunnel per request (plain forwarding may reuse a
		// pooled connection through the old upstream).
		resp, err := httpGet(t, srv.Addr("http"), "scraper-session-keep", "x", target.URL("/ok"), true)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("session request: %v %v", resp, err)
		}
		return resp.Header.Get("X-Rotor-Upstream")
	}
	home := get()
	other := map[string]string{"a": "b", "b": "a"}[home]

	// The home refuses: the request is retried on the other upstream, the
	// home cools and the session moves.
	ups[home].SetMode(upstreamtest.Mode{Fault: upstreamtest.Refuse})
	if got := get(); got != other {
		t.Fatalf("with %s refusing the session went to %q, want %s", home, got, other)
	}
	waitState(t, srv, home, health.Cooling)
	if !strings.Contains(logs.String(), fmt.Sprintf(`"session":"keep","from":"%s","to":"%s"`, home, other)) {
		t.Errorf("no session move logged:\n%s", logs.String())
	}

	// The old home recovers (its probe passes): the session stays.
	ups[home].SetMode(upstreamtest.Mode{Fault: upstreamtest.Accept})
	waitState(t, srv, home, health.Eligible)
	for i := 0; i < 4; i++ {
		if got := get(); got != other {
			t.Fatalf("after %s recovered the session went to %q, want %s", home, got, other)
		}
	}
}

func TestScraperTagsRestrict(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	names := []string{"us-1", "de-1", "de-2"}
	ups := map[string]*upstreamtest.Server{}
	for _, n := range names {
		ups[n] = upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	}
	tags := map[string]string{"us-1": `tags = ["us", "residential"]`, "de-1": `tags = ["de"]`, "de-2": `tags = ["de", "residential"]`}
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nwait_for_upstream = \"200ms\"\n%s",
		probeConf(target), upstreamConf(names, ups, tags)))

	tests := []struct {
		user string
		want map[string]bool
	}{
		{"scraper-tag-de", map[string]bool{"de-1": true, "de-2": true}},
		{"scraper-tag-residential-tag-de", map[string]bool{"de-2": true}},
		{"scraper-session-t1-tag-us", map[string]bool{"us-1": true}},
	}
	for _, tc := range tests {
		t.Run(tc.user, func(t *testing.T) {
			for i := 0; i < 6; i++ {
				resp, err := httpGet(t, srv.Addr("http"), tc.user, "x", target.URL("/ok"), i%2 == 1)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("request %d: %v %v", i, resp, err)
				}
				if got := resp.Header.Get("X-Rotor-Upstream"); !tc.want[got] {
					t.Fatalf("request %d served by %q, want one of %v", i, got, tc.want)
				}
			}
			before := tunnelCounts(ups)
			for i := 0; i < 4; i++ {
				if resp, err := socksGet(t, srv.Addr("socks5"), tc.user, "x", target.URL("/ok")); err != nil || resp.StatusCode != 200 {
					t.Fatalf("socks5 request %d: %v %v", i, resp, err)
				}
			}
			for n := range tunnelDeltas(ups, before) {
				if !tc.want[n] {
					t.Errorf("socks5 tunnel through %s, want only %v", n, tc.want)
				}
			}
		})
	}
	t.Run("no upstream has the tag", func(t *testing.T) {
		resp, err := httpGet(t, srv.Addr("http"), "scraper-tag-fr", "x", target.URL("/ok"), false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.HasPrefix(resp.Header.Get("X-Rotor-Error"), "unavailable") {
			t.Errorf("got %d %q, want 503 unavailable", resp.StatusCode, resp.Header.Get("X-Rotor-Error"))
		}
		if body := bodyOf(resp); !strings.Contains(body, `tags "fr"`) {
			t.Errorf("503 body %q does not name the tag", body)
		}
		if code := socksConnectUser(t, srv.Addr("socks5"), "scraper-tag-fr", "x", target.Addr()); code != repGeneralFailure {
			t.Errorf("SOCKS reply %#x, want general failure", code)
		}
	})
}

// TestScraperRetryOnStatus: upstream "ban" answers every request with 429
// itself (as a proxy whose exit a site rate-limits would relay it). GET is
// retried on the other upstream; POST is not, and gets the 429.
func TestScraperRetryOnStatus(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	names := []string{"ban", "good"}
	ups := map[string]*upstreamtest.Server{
		"ban":  upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: 429}}),
		"good": upstreamtest.NewHTTPProxy(t, upstreamtest.Options{}),
	}
	// target_http_error.statuses is empty so that the ban does not also
	// cool "ban" for the target host: this test is about the retry alone.
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nstrategy = \"round-robin\"\nretry_statuses = [429]\n[target_http_error]\nstatuses = []\n%s",
		probeConf(target), upstreamConf(names, ups, nil)))
	front := srv.Addr("http")

	banned := ups["ban"].Connections()
	for i := 0; i < 4; i++ {
		resp, err := httpGet(t, front, "", "", target.URL("/ok"), false)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.Header.Get("X-Rotor-Upstream") != "good" {
			t.Fatalf("GET %d: %d via %q, want 200 via good", i, resp.StatusCode, resp.Header.Get("X-Rotor-Upstream"))
		}
	}
	if ups["ban"].Connections() == banned {
		t.Fatal("the banning upstream was never tried: the retry was not exercised")
	}

	banned = ups["ban"].Connections()
	got429 := 0
	for i := 0; i < 4; i++ {
		resp, err := postThrough(front, target.URL("/echo"), "payload")
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case resp.StatusCode == 429 && resp.Header.Get("X-Rotor-Upstream") == "ban":
			got429++
		case resp.StatusCode == 200 && resp.Header.Get("X-Rotor-Upstream") == "good":
			if b := bodyOf(resp); b != "payload" {
				t.Errorf("POST %d echoed %q", i, b)
			}
		default:
			t.Fatalf("POST %d: %d via %q", i, resp.StatusCode, resp.Header.Get("X-Rotor-Upstream"))
		}
	}
	if tried := ups["ban"].Connections() - banned; got429 == 0 || int64(got429) != tried {
		t.Errorf("%d POSTs answered 429, %d reached the banning upstream; want equal and > 0 (no retry)", got429, tried)
	}
}

// postThrough sends one POST through the HTTP front (plain forwarding).
func postThrough(front, rawURL, body string) (*http.Response, error) {
	tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: front}), DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return readAll(c.Post(rawURL, "text/plain", strings.NewReader(body)))
}

// socksConnectUser is socksConnect with RFC 1929 username/password.
func socksConnectUser(t *testing.T, front, user, pass, addr string) byte {
	t.Helper()
	d, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	_ = d.SetDeadline(time.Now().Add(30 * time.Second))
	host, portStr, _ := strings.Cut(addr, ":")
	var port int
	fmt.Sscan(portStr, &port)
	req := []byte{5, 1, 2}
	if _, err := d.Write(req); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	if _, err := io.ReadFull(d, buf[:2]); err != nil || buf[1] != 2 {
		t.Fatalf("method reply %v %v", buf[:2], err)
	}
	auth := append([]byte{1, byte(len(user))}, user...)
	auth = append(auth, byte(len(pass)))
	auth = append(auth, pass...)
	if _, err := d.Write(auth); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(d, buf[:2]); err != nil || buf[1] != 0 {
		t.Fatalf("auth reply %v %v", buf[:2], err)
	}
	conn := append([]byte{5, 1, 0, 3, byte(len(host))}, host...)
	conn = append(conn, byte(port>>8), byte(port))
	if _, err := d.Write(conn); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(d, buf[:4]); err != nil {
		t.Fatalf("connect reply: %v", err)
	}
	return buf[1]
}

// TestScraperPerTargetBan: a 403 from one site cools the upstream for that
// host only; it keeps serving other hosts.
func TestScraperPerTargetBan(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nwait_for_upstream = \"200ms\"\n[target_http_error]\nstatuses = [403]\nscope = \"target\"\n[[upstream]]\nurl = %q\nname = \"a\"\n",
		probeConf(target), up.URL().String()))
	front := srv.Addr("http")
	_, port, _ := net.SplitHostPort(target.Addr())
	banned := "http://127.0.0.1:" + port
	other := "http://localhost:" + port

	resp, err := httpGet(t, front, "", "", banned+"/status/403", false)
	if err != nil || resp.StatusCode != 403 {
		t.Fatalf("ban: %v %v", resp, err)
	}
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("a").Record())
	if snap.State != health.Eligible || len(snap.Targets) != 1 || snap.Targets[0].Host != "127.0.0.1" {
		t.Fatalf("after the ban: state %v targets %+v, want eligible and cooling for 127.0.0.1 only", snap.State, snap.Targets)
	}
	resp, err = httpGet(t, front, "", "", other+"/ok", false)
	if err != nil || resp.StatusCode != 200 || resp.Header.Get("X-Rotor-Upstream") != "a" {
		t.Fatalf("other host: %v %v, want 200 via a", resp, err)
	}
	resp, err = httpGet(t, front, "", "", banned+"/ok", false)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("banned host: %v %v, want 503 (a is banned there and is the only upstream)", resp, err)
	}
}

// TestBanCooldownGrows: a host that bans an upstream again right after
// its per-target cooldown ended is banned for longer (cooldowns double on
// repeated failures). Issue: the answer counted as a success first, which
// restarted the streak, so every ban was a first ban (3 s, 3 s, 3 s).
func TestBanCooldownGrows(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nwait_for_upstream = \"50ms\"\n"+
		"[cooldown]\nmultiplier = 2.0\njitter = 0.1\n[cooldown.target_http_error]\nbase = \"300ms\"\nmax = \"10s\"\n"+
		"[[upstream]]\nurl = %q\nname = \"up\"\n", probeConf(target), up.URL().String()))
	front := srv.Addr("http")
	var lengths []time.Duration
	for i := range 3 {
		resp, err := httpGet(t, front, "", "", target.URL("/status/429"), false)
		if err != nil || resp.StatusCode != 429 {
			t.Fatalf("ban %d: %v %v", i, resp, err)
		}
		at := time.Now()
		s := snapOf(t, srv, "up")
		if len(s.Targets) != 1 {
			t.Fatalf("ban %d: per-target cooldowns %+v, want one", i, s.Targets)
		}
		lengths = append(lengths, s.Targets[0].Until.Sub(at))
		time.Sleep(time.Until(s.Targets[0].Until) + 50*time.Millisecond)
	}
	// 300 ms, 600 ms, 1.2 s, each ±10 %, less the time the answer took.
	for i := 1; i < len(lengths); i++ {
		if lengths[i] < lengths[i-1]*3/2 {
			t.Errorf("ban cooldowns %v: want each about twice the one before", lengths)
			break
		}
	}
}

// TestSlowTargetIsNotTheUpstreams: a plain-HTTP GET whose target takes
// longer than slow_body.first_byte gets a second opinion from another
// upstream; when that one is silent too the target is slow: the client
// gets 504 and neither upstream cools. An upstream that is itself slow
// (another answers the same request in time) still cools. Issue: one
// slow page cooled every upstream it was retried on, as slow_body, and a
// small pool went 503 for every client.
func TestSlowTargetIsNotTheUpstreams(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	names := []string{"a", "b", "c"}
	ups := map[string]*upstreamtest.Server{}
	for _, n := range names {
		ups[n] = upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	}
	srv, _ := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nstrategy = \"round-robin\"\n[slow_body]\nfirst_byte = \"300ms\"\n%s",
		probeConf(target), upstreamConf(names, ups, nil)))
	front := srv.Addr("http")

	resp, err := httpGet(t, front, "", "", target.URL("/delay/3s"), false)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusGatewayTimeout || !strings.HasPrefix(resp.Header.Get("X-Rotor-Error"), "target_timeout; stage=first_byte") {
		t.Errorf("slow target: %d %q, want 504 target_timeout; stage=first_byte", resp.StatusCode, resp.Header.Get("X-Rotor-Error"))
	}
	tried := 0
	for _, n := range names {
		tried += int(ups[n].Connections())
		if s := snapOf(t, srv, n); s.State != health.Eligible || s.Failures[health.SlowBody] != 0 {
			t.Errorf("%s: %v, slow_body failures %d: a slow target cooled it", n, s.State, s.Failures[health.SlowBody])
		}
	}
	if tried != 2 {
		t.Errorf("the slow request reached %d upstreams, want 2 (no third try)", tried)
	}

	// One upstream slow itself: another answers, the slow one cools.
	ups["a"].SetMode(upstreamtest.Mode{Fault: upstreamtest.Accept, FirstByteDelay: 3 * time.Second})
	for i := 0; i < 3 && snapOf(t, srv, "a").Failures[health.SlowBody] == 0; i++ {
		resp, err := httpGet(t, front, "", "", target.URL("/ok"), false)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %d with a slow upstream: %v %v, want 200 from another", i, resp, err)
		}
	}
	if s := snapOf(t, srv, "a"); s.State != health.Cooling || s.Reason != health.SlowBody {
		t.Errorf("the slow upstream: %v %v, want cooling slow_body", s.State, s.Reason)
	}
}
