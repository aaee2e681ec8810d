package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// linesWith returns the log lines with message msg so far, decoded. The
// log tests of every front share it (there were two copies, one for
// "request forwarded" only).
func linesWith(t *testing.T, logs *logBuffer, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for l := range strings.SplitSeq(logs.String(), "\n") {
		if !strings.Contains(l, `"message":"`+msg+`"`) {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// forwardingClient is an HTTP client that sends every request through
// srv's HTTP front, a new connection each, closed when the test ends.
func forwardingClient(t *testing.T, srv *Server) *http.Client {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: srv.Addr("http")}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
