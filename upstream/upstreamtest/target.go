package upstreamtest

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Target is an HTTP server on 127.0.0.1:0 for tunnels to reach. Routes:
//
//	/ and /ok        200 "ok\n"
//	/status/N        status N, body "status N\n"
//	/stall/N         200, N bytes of 'x' flushed, then silence until the
//	                 client goes or the target closes (Content-Length N+1)
//	/delay/DUR       waits DUR (Go duration) before the headers, then 200
//	/echo            200 with the request body echoed back
type Target struct {
	srv      *httptest.Server
	closing  chan struct{}
	requests atomic.Int64
}

// NewTarget starts a Target; t.Cleanup closes it.
func NewTarget(t testing.TB) *Target {
	t.Helper()
	tg := &Target{closing: make(chan struct{})}
	tg.srv = httptest.NewServer(http.HandlerFunc(tg.serve))
	t.Cleanup(tg.Close)
	return tg
}

// Addr is "127.0.0.1:port".
func (tg *Target) Addr() string { return tg.srv.Listener.Addr().String() }

// URL returns "http://127.0.0.1:port" + path.
func (tg *Target) URL(path string) string { return tg.srv.URL + path }

// Requests counts requests served.
func (tg *Target) Requests() int64 { return tg.requests.Load() }

// Close stops the target, ending stalled handlers first. Idempotent.
func (tg *Target) Close() {
	select {
	case <-tg.closing:
		return
	default:
	}
	close(tg.closing)
	tg.srv.CloseClientConnections()
	tg.srv.Close()
}

func (tg *Target) serve(w http.ResponseWriter, r *http.Request) {
	tg.requests.Add(1)
	path := r.URL.Path
	switch {
	case path == "/" || path == "/ok":
		io.WriteString(w, "ok\n")
	case strings.HasPrefix(path, "/status/"):
		n, err := strconv.Atoi(strings.TrimPrefix(path, "/status/"))
		if err != nil || n < 100 || n > 999 {
			http.Error(w, "bad status", http.StatusBadRequest)
			return
		}
		w.WriteHeader(n)
		io.WriteString(w, "status "+strconv.Itoa(n)+"\n")
	case strings.HasPrefix(path, "/stall/"):
		n, err := strconv.Atoi(strings.TrimPrefix(path, "/stall/"))
		if err != nil || n < 0 || n > 1<<20 {
			http.Error(w, "bad length", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n+1))
		w.Write([]byte(strings.Repeat("x", n)))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-tg.closing:
		}
	case strings.HasPrefix(path, "/delay/"):
		d, err := time.ParseDuration(strings.TrimPrefix(path, "/delay/"))
		if err != nil {
			http.Error(w, "bad duration", http.StatusBadRequest)
			return
		}
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-tm.C:
		case <-r.Context().Done():
			return
		case <-tg.closing:
			return
		}
		io.WriteString(w, "ok\n")
	case path == "/echo":
		io.Copy(w, r.Body)
	default:
		http.NotFound(w, r)
	}
}

// ListenerAddr is a helper for tests that need a bare TCP listener address
// on loopback; the listener is closed by t.Cleanup.
func ListenerAddr(t testing.TB) (net.Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("upstreamtest: listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, ln.Addr().String()
}
