package interop

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// probePath is where rotor's probe is pointed; it is counted separately and
// always answers 200 unless a behaviour is set for it explicitly.
const probePath = "/probe"

// behaviour is how the target answers one source address.
// target407Path answers the target's own 407 with a Proxy-Authenticate
// challenge, whatever the behaviour.
const target407Path = "/own407"

type behaviour struct {
	Status int  // non-zero: answer this status (403, 429, …)
	Stall  bool // send headers and part of the body, then go silent
	Hold   bool // read the request, send nothing until the client leaves
	Hangup bool // close the connection without answering
}

// target is an in-process HTTP server on 127.0.0.1 that answers per source
// address of the connection (the exit address of the upstream in front of
// it) and counts requests per source and per path.
type target struct {
	URL  string // http://127.0.0.1:PORT
	Addr string

	mu       sync.Mutex
	behave   map[string]behaviour // by source IP; "" = everyone
	bySource map[string]int
	byPath   map[string]int
	byBoth   map[string]int // "ip path"
	closing  chan struct{}
}

// newTarget starts a target that lives until t ends.
func newTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("target listen: %v", err)
	}
	tg := &target{
		Addr:     ln.Addr().String(),
		behave:   map[string]behaviour{},
		bySource: map[string]int{},
		byPath:   map[string]int{},
		byBoth:   map[string]int{},
		closing:  make(chan struct{}),
	}
	tg.URL = "http://" + tg.Addr
	srv := &http.Server{Handler: tg, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		close(tg.closing)
		srv.Close()
	})
	return tg
}

// set makes the target answer source ip (or everyone, ip "") with b on every
// path but the probe path.
func (tg *target) set(ip string, b behaviour) {
	tg.mu.Lock()
	tg.behave[ip] = b
	tg.mu.Unlock()
}

// setPath sets a behaviour for one path of one source ("ip path").
func (tg *target) setPath(ip, path string, b behaviour) {
	tg.set(ip+" "+path, b)
}

// count returns how many requests source ip made to path ("" = any path).
func (tg *target) count(ip, path string) int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	switch {
	case path == "":
		return tg.bySource[ip]
	case ip == "":
		return tg.byPath[path]
	default:
		return tg.byBoth[ip+" "+path]
	}
}

// counts returns a printable snapshot of the counters.
func (tg *target) counts() string {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return fmt.Sprint(tg.byBoth)
}

func (tg *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	src, _, _ := net.SplitHostPort(r.RemoteAddr)
	tg.mu.Lock()
	tg.bySource[src]++
	tg.byPath[r.URL.Path]++
	tg.byBoth[src+" "+r.URL.Path]++
	b, ok := tg.behave[src+" "+r.URL.Path]
	if !ok && r.URL.Path != probePath {
		b, ok = tg.behave[src]
		if !ok {
			b = tg.behave[""]
		}
	}
	tg.mu.Unlock()

	switch {
	case r.URL.Path == target407Path:
		// A site's own 407 (some answer it to any request): a proxy
		// relays it as the target's answer.
		w.Header().Set("Proxy-Authenticate", `Basic realm="site"`)
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusProxyAuthRequired)
		fmt.Fprintf(w, "the site's own 407 for %s\n", src)
		return
	case b.Hangup:
		if hj, ok := w.(http.Hijacker); ok {
			c, _, err := hj.Hijack()
			if err == nil {
				c.Close()
			}
		}
		return
	case b.Hold:
		select {
		case <-r.Context().Done():
		case <-tg.closing:
		}
		return
	case b.Stall:
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", "1048576")
		w.WriteHeader(http.StatusOK)
		fmt.Fprintf(w, "partial body for %s\n", src)
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-tg.closing:
		}
		return
	case b.Status != 0:
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(b.Status)
		fmt.Fprintf(w, "status %d for %s\n", b.Status, src)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!doctype html><html><head><title>rotor interop</title></head>"+
		"<body><p id=\"src\">ok from %s path %s</p></body></html>\n", src, r.URL.Path)
}

// okBody is the marker an ok answer carries for source ip.
func okBody(ip string) string { return "ok from " + ip }
