package main

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"
)

// testEnv starts the targets and an in-process relay (with its test-only
// HTTP proxy) and returns an env whose "gateway" fronts are the relay.
func testEnv(t *testing.T, mode string) *env {
	t.Helper()
	tg, err := startTargets("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	r, err := startRelay("127.0.0.1:0", "127.0.0.1:0", copyFuncs[mode])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	relayAddr := r.socks.Addr().String()
	return &env{
		dur:        150 * time.Millisecond,
		idleHold:   10 * time.Millisecond,
		idleOpen:   10 * time.Second,
		relayAddr:  relayAddr,
		baseline:   socks5Dialer{proxy: relayAddr},
		fronts:     []front{{"socks5", socks5Dialer{proxy: relayAddr}}, {"connect", connectDialer{proxy: r.http.Addr().String()}}},
		sourceAddr: tg.source.Addr(),
		echoAddr:   tg.echo.Addr(),
		httpURL:    tg.HTTPURL(),
		gwHTTP:     r.http.Addr().String(),
	}
}

// TestPhasesMoveBytes runs every phase briefly against the relay. It checks
// that data arrives and nothing fails; it asserts no timing.
func TestPhasesMoveBytes(t *testing.T) {
	for _, mode := range []string{"idle", "iocopy"} {
		t.Run(mode, func(t *testing.T) { testPhases(t, testEnv(t, mode)) })
	}
}

func testPhases(t *testing.T, e *env) {
	ctx := context.Background()
	for _, p := range pathsOf(e) {
		t.Run(p.Name, func(t *testing.T) {
			for _, streams := range []int{1, 4} {
				b := runBulk(ctx, e, p.Name, p.D, streams)
				if b.Bytes == 0 || b.Errors != 0 || b.Connected != streams {
					t.Errorf("bulk %d streams: got %+v, want bytes > 0 and no errors", streams, b)
				}
			}
			s := runSetup(ctx, e, p.Name, p.D, 4)
			if s.Tunnels == 0 || s.Failures != 0 || s.P99Ms < s.P50Ms {
				t.Errorf("setup: got %+v, want tunnels > 0, no failures, p99 >= p50", s)
			}
		})
	}
	for _, proxy := range []*url.URL{nil, {Scheme: "socks5", Host: e.relayAddr}, {Scheme: "http", Host: e.gwHTTP}} {
		h := runHTTP(ctx, e, "http", proxy, 2)
		if h.Requests == 0 || h.Failures != 0 {
			t.Errorf("http via %v: got %+v, want requests and no failures", proxy, h)
		}
	}
	id := runIdle(ctx, e, "socks5", e.fronts[0].D, 20)
	if id.Established != 20 || id.Alive != 20 {
		t.Errorf("idle: got %+v, want 20 established and alive", id)
	}
}

// TestHopPhasesMoveBytes runs every phase through a pure hop (the
// -gateway-is-hop floor) in front of the relay: the client's SOCKS5 and
// CONNECT handshakes must pass through it unchanged.
func TestHopPhasesMoveBytes(t *testing.T) {
	e := testEnv(t, "idle")
	h, err := startHop("127.0.0.1:0", e.relayAddr, "127.0.0.1:0", e.gwHTTP, copyFuncs["idle"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	e.fronts = []front{{"socks5", socks5Dialer{proxy: h.socks.Addr().String()}}, {"connect", connectDialer{proxy: h.http.Addr().String()}}}
	e.gwHTTP = h.http.Addr().String()
	testPhases(t, e)
}

// TestBulkBudget checks that a byte budget is delivered exactly.
func TestBulkBudget(t *testing.T) {
	e := testEnv(t, "idle")
	e.dur, e.bulkBytes = 5*time.Second, 3<<20
	b := runBulk(context.Background(), e, "baseline", e.baseline, 3)
	if b.Bytes != 3<<20 {
		t.Errorf("got %d bytes, want %d", b.Bytes, 3<<20)
	}
}

// TestRunReport runs the whole tool in-process (relay as gateway) for a few
// hundred milliseconds and checks the report's shape.
func TestRunReport(t *testing.T) {
	o, err := parseFlags([]string{"-gateway-is-relay", "-relay-inproc", "-duration", "100ms", "-warmup", "0",
		"-idle", "10", "-idle-hold", "10ms", "-workers", "2", "-streams", "2", "-only", "idle,bulk,setup,http"}, &strings.Builder{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := run(context.Background(), o, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"timestamp", "commit", "go_version", "mode", "flags", "table", "bulk", "setup", "http", "idle", "notes"} {
		if _, ok := got[k]; !ok {
			t.Errorf("report JSON lacks %q", k)
		}
	}
	figures := map[string]bool{}
	for _, rw := range rep.Table {
		figures[rw.Figure] = true
	}
	for _, want := range []string{"bulk 1 stream(s), socks5", "bulk 1 stream(s), connect", "setup rate, socks5, 2 workers",
		"setup p99 latency, connect", "http forward vs relay socks5 keep-alive", "idle tunnels alive after hold (of 10)"} {
		if !figures[want] {
			t.Errorf("table lacks %q; have %v", want, figures)
		}
	}
	var text strings.Builder
	rep.WriteText(&text)
	if !strings.Contains(text.String(), "ratio") {
		t.Errorf("text report lacks the header:\n%s", text.String())
	}
}

func TestQuantile(t *testing.T) {
	xs := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}} {
		if got := quantile(xs, tc.q); got != tc.want {
			t.Errorf("quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
	if got := quantile(nil, 0.5); got != 0 {
		t.Errorf("quantile(nil) = %v, want 0", got)
	}
}

func TestIsLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1080": true, "127.1.2.3:1": true, "[::1]:80": true, "localhost:1": true,
		"10.0.0.1:1080": false, "example.com:80": false, ":1080": false, "127.0.0.1": false,
	} {
		if got := isLoopbackAddr(addr); got != want {
			t.Errorf("isLoopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestPairedRatio(t *testing.T) {
	xs := []bulkResult{
		{Path: "baseline", Round: 1, MBps: 100}, {Path: "socks5", Round: 1, MBps: 80},
		{Path: "baseline", Round: 2, MBps: 50}, {Path: "socks5", Round: 2, MBps: 45},
		{Path: "baseline", Round: 3, MBps: 200}, {Path: "socks5", Round: 3, MBps: 100},
	}
	got := pairedRatio(xs, func(b bulkResult) bool { return b.Path == "socks5" },
		func(b bulkResult) bool { return b.Path == "baseline" },
		func(b bulkResult) int { return b.Round }, func(b bulkResult) float64 { return b.MBps })
	if got == nil || *got != 0.8 {
		t.Errorf("pairedRatio = %v, want 0.8 (median of 0.8, 0.9, 0.5)", got)
	}
	if one := pairedRatio(xs[:2], func(b bulkResult) bool { return b.Path == "socks5" },
		func(b bulkResult) bool { return b.Path == "baseline" },
		func(b bulkResult) int { return b.Round }, func(b bulkResult) float64 { return b.MBps }); one != nil {
		t.Errorf("pairedRatio over one round = %v, want nil", *one)
	}
}

func TestNumberFormats(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	for _, tt := range []struct {
		got, want string
	}{
		{num(nil), "n/a"},
		{num(f(2)), "2"},
		{num(f(5.97)), "5.970"},
		{num(f(-0.0002)), "0.000"}, // one goroutine fewer over 5,000 tunnels, not "-0.000"
		{num(f(-0.25)), "-0.250"},
		{num(f(19.5)), "19.5"},
		{num(f(1446.4)), "1446"},
		{ratio(nil), "-"},
		{ratio(f(0.5673)), "0.567x"}, // not 0.57x next to a target of 0.57 it misses
	} {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
