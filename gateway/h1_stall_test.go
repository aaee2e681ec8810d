package gateway

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// sendGateway starts a gateway over the direct upstream ("up") with the
// HTTP front's send limit shortened to idle, and returns it with its log.
func sendGateway(t *testing.T, idle time.Duration) (*Server, *logBuffer) {
	t.Helper()
	srv, logs := newGateway(t, "send.toml", "allow_private_destinations = true\n"+listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	srv.h1.sendIdle = idle
	serve(t, srv)
	return srv, logs
}

// endlessTarget answers every request with a body that never ends:
// whatever the socket buffers hold, the writes reach a client that reads
// nothing. ended is closed when a write fails (rotor let go).
func endlessTarget(t *testing.T) (rt *rawTarget, ended chan struct{}) {
	ended = make(chan struct{})
	var once sync.Once
	rt = newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n")
		buf := make([]byte, 32<<10)
		for {
			if _, err := c.Write(buf); err != nil {
				once.Do(func() { close(ended) })
				return
			}
		}
	})
	return rt, ended
}

// A client that stops reading a forwarded answer (its receive window
// full) is taken for gone once nothing could be written to it for the
// send limit: the connection closes, the upstream exchange ends, the
// request is logged client_gone and no upstream is blamed. rotor used to
// hold the connection and the request's goroutine for as long as the
// client liked (a slow-read client kept its slot for ever), then log ok.
func TestH1ClientThatStopsReadingIsCut(t *testing.T) {
	rt, ended := endlessTarget(t)
	srv, logs := sendGateway(t, 500*time.Millisecond)
	c, _ := h1Dial(t, srv)
	_ = c.(*net.TCPConn).SetReadBuffer(4096)
	// Pipelined requests: the later ones are never served.
	for i := 0; i < 3; i++ {
		fmt.Fprintf(c, "GET http://%s/big.bin HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	}
	select {
	case <-ended:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream exchange of a client that reads nothing still runs after 20s")
	}
	line := forwardLine(t, logs)
	if !strings.Contains(line, `"outcome":"client_gone"`) || !strings.Contains(line, `"level":"info"`) ||
		strings.Contains(line, `"class"`) || !strings.Contains(line, "it took nothing of the answer") {
		t.Errorf("log line %s, want outcome client_gone at info, no class, saying the client took nothing", line)
	}
	noFailures(t, srv, "up")
	if got := rt.accepts.Load(); got != 1 {
		t.Errorf("%d upstream connections, want 1 (the pipelined requests after the cut one are not served)", got)
	}
	// The connection is closed: what the client reads now ends (with
	// what was queued, then a reset or EOF), it does not wait.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c); errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the connection of a client that stopped reading is still open")
	}
	eventually(t, "the connection's slot freed", func() bool {
		srv.h1.mu.Lock()
		defer srv.h1.mu.Unlock()
		return len(srv.h1.conns) == 0
	})
}

// slowReader reads at most 512 KiB every 100 ms.
type slowReader struct {
	r    io.Reader
	left int // bytes it may still read before the next pause
}

func (s *slowReader) Read(p []byte) (int, error) {
	if s.left == 0 {
		time.Sleep(100 * time.Millisecond)
		s.left = 512 << 10
	}
	n, err := s.r.Read(p[:min(len(p), s.left)])
	s.left -= n
	return n, err
}

// A client that reads its answer slowly but steadily is not cut, however
// long the answer takes past the send limit: each write that takes some
// bytes moves the deadline. The answer (16 MiB, read in 3 s or more) is
// larger than what the sockets' buffers hold, so rotor's writes wait on
// the reader for most of it.
func TestH1SlowReaderIsNotCut(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", len(body))
		c.Write(body)
	})
	srv, logs := sendGateway(t, time.Second)
	c, _ := h1Dial(t, srv)
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	r, b := h1Read(t, bufio.NewReader(&slowReader{r: c}), "GET")
	if r.StatusCode != http.StatusOK || b != string(body) {
		t.Fatalf("answer %d with %d body bytes, want 200 with %d", r.StatusCode, len(b), len(body))
	}
	if line := forwardLine(t, logs); !strings.Contains(line, `"outcome":"ok"`) {
		t.Errorf("log line %s, want outcome ok", line)
	}
}

// sendLimit gives each write the limit: a reader slow enough to take a
// write within it is not cut, however many writes the answer takes; one
// that takes a write's bytes too slowly, or nothing, fails that write,
// and the running request is cancelled, naming the stall as the cause.
func TestSendLimit(t *testing.T) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	hc := &h1Conn{c: a, cancel: cancel}
	l := &sendLimit{hc: hc, idle: time.Second}
	read := make(chan int, 1)
	go func() { // owner: this test; ends when the pipe is closed or 40 reads were made
		n := 0
		p := make([]byte, 512)
		for i := 0; i < 40; i++ { // net.Pipe buffers nothing: 50 ms per 512 bytes
			time.Sleep(50 * time.Millisecond)
			m, err := b.Read(p)
			n += m
			if err != nil {
				break
			}
		}
		read <- n
	}()
	p := make([]byte, 2048) // 0.2 s a write: 10 writes, 2 s, twice the limit
	for i := 0; i < 10; i++ {
		if n, err := l.Write(p); n != len(p) || err != nil {
			t.Fatalf("write %d to a slow reader: %d, %v, want all %d bytes", i, n, err, len(p))
		}
	}
	if n := <-read; n != 10*len(p) {
		t.Fatalf("the reader got %d bytes, want %d", n, 10*len(p))
	}
	if ctx.Err() != nil {
		t.Fatalf("the request was cancelled: %v", context.Cause(ctx))
	}
	// A reader that takes a write's bytes over more than the limit.
	go func() { // owner: this test; ends after 4 reads or when the pipe is closed
		n := 0
		for i := 0; i < 4; i++ {
			time.Sleep(400 * time.Millisecond)
			m, err := b.Read(make([]byte, 512))
			n += m
			if err != nil {
				break
			}
		}
		read <- n
	}()
	if _, err := l.Write(p); !errors.Is(err, errClientStalled) {
		t.Fatalf("a write taken over 1.6 s with a 1 s limit: %v, want errClientStalled", err)
	}
	if err := context.Cause(ctx); !errors.Is(err, errClientStalled) {
		t.Fatalf("the request's cause is %v, want errClientStalled", err)
	}
	b.Close()
	<-read
}

// A request head that began but is not all there when its deadline
// passes gets 408 bad_request, whatever the part that came looks like;
// rotor used to parse the part as a whole head (bufio returns a partial
// line at a deadline) and answer "400 malformed HTTP version" or "400
// malformed request line", or close without a word when the request line
// was whole. A connection that sent nothing, or only empty lines, is
// closed without an answer, as before.
func TestH1CutHeadIs408(t *testing.T) {
	srv := directGateway(t) // handshake_timeout 300ms
	target := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"))
	full := fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target.Addr(), target.Addr())
	for _, tc := range []struct {
		name  string
		first bool     // a whole request before, on the same connection
		parts []string // sent 100 ms apart
	}{
		{"request line cut", false, []string{"GET http://" + target.Addr() + "/ HT"}},
		{"header fields cut", false, []string{"GET http://" + target.Addr() + "/ HTTP/1.1\r\nHost: x\r\nX-A: b"}},
		{"whole fields, no blank line", false, []string{"GET http://" + target.Addr() + "/ HTTP/1.1\r\nHost: x\r\n"}},
		{"second head cut", true, []string{"GET http://" + target.Addr() + "/ HTTP/1.1\r\nHo"}},
		{"second head trickled", true, []string{"G", "E", "T", " "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			if tc.first {
				io.WriteString(c, full)
				if r, b := h1Read(t, br, "GET"); r.StatusCode != http.StatusOK || b != "ok\n" {
					t.Fatalf("first answer %d %q", r.StatusCode, b)
				}
			}
			for i, p := range tc.parts {
				if i > 0 {
					time.Sleep(100 * time.Millisecond)
				}
				io.WriteString(c, p)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || resp.Header.Get("X-Rotor-Error") != "bad_request" ||
				!resp.Close || !strings.Contains(string(b), "request head incomplete") {
				t.Fatalf("answer %d X-Rotor-Error %q close=%v %q, want 408 bad_request closing, request head incomplete",
					resp.StatusCode, resp.Header.Get("X-Rotor-Error"), resp.Close, b)
			}
			wantClosed(t, c, br)
		})
	}
	for _, tc := range []struct{ name, sent string }{{"nothing", ""}, {"empty lines only", "\r\n\r\n"}} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			io.WriteString(c, tc.sent)
			wantClosed(t, c, br)
		})
	}
}

// TestH1StalledClientCutAtTheLimit: a client that takes nothing is cut
// once the limit ran out, not twice the limit: the data that left as the
// first blocked write began (room the client had made before it stopped)
// was taken for the client reading, and the clock started over (a real
// 60 s limit cut such clients after 120 s).
func TestH1StalledClientCutAtTheLimit(t *testing.T) {
	const idle = 2 * time.Second
	rt, ended := endlessTarget(t)
	srv, _ := sendGateway(t, idle)
	c, _ := h1Dial(t, srv)
	start := time.Now()
	fmt.Fprintf(c, "GET http://%s/big.bin HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("a client that reads nothing is not cut after 30s")
	}
	// Generous for a loaded machine, well short of twice the limit.
	if took := time.Since(start); took > idle*7/4 {
		t.Errorf("cut after %v, want about the %v limit (not twice it)", took.Round(10*time.Millisecond), idle)
	}
}
