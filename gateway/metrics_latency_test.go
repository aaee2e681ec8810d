package gateway

import (
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestMetricsUpstreamLatency: /metrics carries each upstream's smoothed
// set-up time, the figure the admin API shows as latency_ms and
// lowest-latency picks by, in seconds (rotor_upstream_latency_seconds).
// Issue: /metrics had no latency figure per upstream. Before any tunnel
// measured one the series is absent (never 0 nor NaN, which would read as
// the fastest upstream or break a dashboard's min()).
func TestMetricsUpstreamLatency(t *testing.T) {
	srv := directGateway(t)
	series := regexp.MustCompile(`(?m)^rotor_upstream_latency_seconds\{upstream="up"\} (\S+)$`)
	body := scrapeMetrics(t, srv)
	if m := series.FindStringSubmatch(body); m != nil {
		t.Fatalf("latency before any tunnel: %s", m[0])
	}
	if strings.Contains(body, "NaN") {
		t.Errorf("exposition has NaN values")
	}

	target := upstreamtest.NewTarget(t)
	resp, err := connectGet(srv.Addr("http"), "", "", target.URL("/ok"))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("tunnel: %v %v", resp, err)
	}
	body = scrapeMetrics(t, srv)
	m := series.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no rotor_upstream_latency_seconds for up after a tunnel in:\n%s", grepLines(body, "rotor_upstream_"))
	}
	got, err := strconv.ParseFloat(m[1], 64)
	want := srv.pool.Lookup("up").Latency().Seconds()
	if err != nil || want <= 0 || math.Abs(got-want) > 1e-9 {
		t.Errorf("rotor_upstream_latency_seconds = %s, want %v (the admin API's latency_ms in seconds)", m[1], want)
	}
	if !strings.Contains(body, "# TYPE rotor_upstream_latency_seconds gauge") {
		t.Errorf("rotor_upstream_latency_seconds is not a gauge")
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
