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

// sendLimit extends its deadline while the reader takes bytes, so one
// write may outlast the limit many times over; once the reader takes
// nothing for the limit, the write fails and the running request is
// cancelled, naming the stall as the cause. (A pipe has no socket to ask:
// the bytes each wait moved stand for progress, as off Linux.)
func TestSendLimit(t *testing.T) {
	a, b := net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	hc := &h1Conn{c: a, cancel: cancel}
	l := &sendLimit{hc: hc, idle: time.Second}
	read := make(chan int, 1)
	go func() { // owner: this test; ends when the pipe is closed or 32 reads were made
		n := 0
		p := make([]byte, 512)
		for i := 0; i < 32; i++ { // net.Pipe buffers nothing: 100 ms per 512 bytes
			time.Sleep(100 * time.Millisecond)
			m, err := b.Read(p)
			n += m
			if err != nil {
				break
			}
		}
		read <- n
	}()
	p := make([]byte, 16<<10) // 32 reads: about 3 send limits
	if n, err := l.Write(p); n != len(p) || err != nil {
		t.Fatalf("a write to a slow reader: %d, %v, want all %d bytes", n, err, len(p))
	}
	if n := <-read; n != len(p) {
		t.Fatalf("the reader got %d bytes, want %d", n, len(p))
	}
	if ctx.Err() != nil {
		t.Fatalf("the request was cancelled: %v", context.Cause(ctx))
	}
	// A wait without progress long ago, then bytes taken: the next write
	// that waits starts a new clock (it used to fail at once, its
	// deadline already past).
	l.since, l.moved = time.Now().Add(-time.Hour), time.Now().Add(-time.Minute)
	go func() { // owner: this test; ends after one read
		time.Sleep(200 * time.Millisecond)
		m, _ := b.Read(make([]byte, 1024))
		read <- m
	}()
	if n, err := l.Write(p[:1024]); n != 1024 || err != nil {
		t.Fatalf("a write after an old wait: %d, %v, want all 1024 bytes", n, err)
	}
	<-read
	// Nobody reads now.
	if n, err := l.Write(p); n != 0 || !errors.Is(err, errClientStalled) {
		t.Fatalf("a write nobody reads: %d, %v, want 0 and errClientStalled", n, err)
	}
	if err := context.Cause(ctx); !errors.Is(err, errClientStalled) {
		t.Fatalf("the request's cause is %v, want errClientStalled", err)
	}
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

// TestH1TricklingReaderIsNotCut: a client that reads a little all the
// time (less per send limit than the socket buffers hold) is not cut: a
// rule that wanted each write taken within the limit cut it, as the
// kernel wakes a blocked write only once a third of a send buffer of
// megabytes has drained (a 20 KB/s reader was cut at 60 s).
func TestH1TricklingReaderIsNotCut(t *testing.T) {
	const size = 8 << 20
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n", size)
		_, _ = c.Write(make([]byte, size))
	})
	srv, logs := sendGateway(t, time.Second)
	c, _ := h1Dial(t, srv)
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("answer: %v %v", statusOf(resp), err)
	}
	p := make([]byte, 4096)
	// 4 KiB each 10 ms for 3.5 send limits: the kernel sends on a window
	// update once 64 KiB (loopback's MSS) were read, every 160 ms or so,
	// while a blocked write is woken only after a third of the send
	// buffer (megabytes) drained, seconds.
	for end := time.Now().Add(3500 * time.Millisecond); time.Now().Before(end); {
		if _, err := io.ReadFull(resp.Body, p); err != nil {
			t.Fatalf("cut while trickling: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("the rest: %v", err)
	}
	if line := forwardLine(t, logs); !strings.Contains(line, `"outcome":"ok"`) {
		t.Errorf("log line %s, want outcome ok", line)
	}
}
