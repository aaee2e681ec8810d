package gateway

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestForwardLogCountsStatusRetries: the "attempts" of a forwarded
// request's line counts every upstream it went through, those whose
// answer was retried for its status (pool.retry_statuses) included. It
// counted the failed attempts only, plus one: a request that m1 and m2
// answered 403 and 429 and m3 served, or that all three answered with a
// retry status, logged attempts 1.
func TestForwardLogCountsStatusRetries(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	banning := func(code int) *upstreamtest.Server {
		return upstreamtest.NewHTTPProxy(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Reply, Code: code}})
	}
	cases := []struct {
		name   string
		ups    map[string]*upstreamtest.Server
		status int // what every request gets
	}{
		{"served by the last", map[string]*upstreamtest.Server{"m1": banning(403), "m2": banning(429), "m3": upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})}, 200},
		{"every answer retried", map[string]*upstreamtest.Server{"m1": banning(403), "m2": banning(429), "m3": banning(403)}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			names := []string{"m1", "m2", "m3"}
			// target_http_error.statuses is empty so that no upstream
			// cools for the host: each request meets the same three.
			srv, logs := startGateway(t, fmt.Sprintf("%s\n[pool]\nstart_eligible = true\nmax_attempts = 3\nretry_statuses = [403, 429, 501]\n[target_http_error]\nstatuses = []\n%s",
				probeConf(target), upstreamConf(names, tc.ups, nil)))
			c := forwardingClient(t, srv)
			maxSeen := 0
			for i, method := range []string{http.MethodGet, http.MethodOptions, http.MethodGet, http.MethodOptions, http.MethodHead, http.MethodGet} {
				before := map[string]int64{}
				for n, u := range tc.ups {
					before[n] = u.Connections()
				}
				req, _ := http.NewRequest(method, target.URL("/ok"), nil)
				resp, err := readAll(c.Do(req))
				if err != nil {
					t.Fatalf("%s %d: %v", method, i, err)
				}
				if tc.status != 0 && resp.StatusCode != tc.status {
					t.Fatalf("%s %d: status %d, want %d", method, i, resp.StatusCode, tc.status)
				}
				var lines []map[string]any
				eventually(t, "the request's log line", func() bool {
					lines = linesWith(t, logs, "request forwarded")
					return len(lines) > i
				})
				var reached int64
				for n, u := range tc.ups {
					reached += u.Connections() - before[n]
				}
				got, _ := lines[i]["attempts"].(float64)
				if int64(got) != reached {
					t.Errorf("%s %d answered %d via %v: attempts %v in the log, %d upstreams reached", method, i, resp.StatusCode, lines[i]["upstream"], got, reached)
				}
				if tc.status == 0 && got != 3 {
					t.Errorf("%s %d: attempts %v, want 3 (every upstream answered with a retry status)", method, i, got)
				}
				maxSeen = max(maxSeen, int(got))
			}
			if maxSeen < 2 {
				t.Errorf("no request was retried for its status (max attempts %d): the test exercised nothing", maxSeen)
			}
		})
	}
}
