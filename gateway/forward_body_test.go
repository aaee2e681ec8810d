package gateway

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// bodyGateway starts a gateway over two fake http:// upstreams ("a" and
// "b") with the body idle limit shortened to idle, and returns it with
// its log.
func bodyGateway(t *testing.T, idle time.Duration, extra string) (*Server, *logBuffer) {
	t.Helper()
	a := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	b := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
	srv, logs := newGateway(t, "body.toml", listenConf("")+extra+fmt.Sprintf(
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = %q\nname = \"a\"\n[[upstream]]\nurl = %q\nname = \"b\"\n",
		a.URL(), b.URL()))
	srv.h1.bodyIdle = idle
	serve(t, srv)
	return srv, logs
}

// forwardLine waits for the log line of the forwarded request and
// returns it.
func forwardLine(t *testing.T, logs *logBuffer) string {
	t.Helper()
	var line string
	eventually(t, "the request's log line", func() bool {
		for l := range strings.SplitSeq(logs.String(), "\n") {
			if strings.Contains(l, `"request forwarded"`) {
				line = l
				return true
			}
		}
		return false
	})
	return line
}

// TestForwardClientBodyErrorIsTheClients: an error reading the client's
// streamed request body (chunked, or over pool.retry_body_limit) is the
// client's: it is told so (400 malformed, 408 stalled) or, gone, logged
// client_gone; no upstream is reported to, and no other upstream is
// tried. rotor used to answer 502 target_unreachable (or slow_body with
// its own client socket's i/o timeout as the detail) and cool upstreams
// for it.
func TestForwardClientBodyErrorIsTheClients(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", target.URL("/echo"), target.Addr())

	t.Run("malformed chunk size", func(t *testing.T) {
		srv, logs := bodyGateway(t, time.Minute, "")
		for range 3 { // enough to cool both upstreams by the target-failure rule before
			c, br := h1Dial(t, srv)
			io.WriteString(c, head+"zz\r\nhello\r\n0\r\n\r\n")
			r, body := h1Read(t, br, http.MethodPost)
			if r.StatusCode != http.StatusBadRequest || r.Header.Get("X-Rotor-Error") != "bad_request" ||
				!strings.Contains(body, "malformed request body") {
				t.Fatalf("answer %d %q %q, want 400 bad_request saying the body is malformed",
					r.StatusCode, r.Header.Get("X-Rotor-Error"), body)
			}
			wantClosed(t, c, br)
		}
		noFailures(t, srv, "a")
		noFailures(t, srv, "b")
		if line := forwardLine(t, logs); !strings.Contains(line, `"outcome":"bad_request"`) || !strings.Contains(line, `"level":"info"`) {
			t.Errorf("log line %s, want outcome bad_request at info", line)
		}
		// Both upstreams still serve.
		resp, err := httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("a good request after them: %v %v", statusOf(resp), err)
		}
	})

	t.Run("stalled", func(t *testing.T) {
		srv, logs := bodyGateway(t, 300*time.Millisecond, "")
		c, br := h1Dial(t, srv)
		io.WriteString(c, head+"1\r\nx\r\n") // then silence
		r, body := h1Read(t, br, http.MethodPost)
		if r.StatusCode != http.StatusRequestTimeout || r.Header.Get("X-Rotor-Error") != "bad_request" ||
			!strings.Contains(body, "request body stalled") {
			t.Fatalf("answer %d %q %q, want 408 bad_request saying the body stalled",
				r.StatusCode, r.Header.Get("X-Rotor-Error"), body)
		}
		noFailures(t, srv, "a")
		noFailures(t, srv, "b")
		if line := forwardLine(t, logs); !strings.Contains(line, `"outcome":"bad_request"`) {
			t.Errorf("log line %s, want outcome bad_request", line)
		}
	})

	t.Run("small body stalled", func(t *testing.T) {
		// A body small enough to buffer (for retries) is read before any
		// upstream, within listen.handshake_timeout: its stall gets the
		// same 408 and log line (it got a bare 400 "i/o timeout" and no
		// line).
		srv, logs := bodyGateway(t, time.Minute, "") // listenConf's handshake_timeout is 300ms
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 10\r\n\r\nabc", target.URL("/echo"), target.Addr())
		r, body := h1Read(t, br, http.MethodPost)
		if r.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "request body stalled") {
			t.Fatalf("answer %d %q, want 408 saying the body stalled", r.StatusCode, body)
		}
		if line := forwardLine(t, logs); !strings.Contains(line, `"outcome":"bad_request"`) {
			t.Errorf("log line %s, want outcome bad_request", line)
		}
		noFailures(t, srv, "a")
		noFailures(t, srv, "b")
	})

	t.Run("client leaves mid-body", func(t *testing.T) {
		srv, logs := bodyGateway(t, time.Minute, "")
		c, _ := h1Dial(t, srv)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 200000\r\n\r\n%s",
			target.URL("/echo"), target.Addr(), strings.Repeat("x", 100000))
		c.Close()
		line := forwardLine(t, logs)
		if !strings.Contains(line, `"outcome":"client_gone"`) || strings.Contains(line, "target_unreachable") {
			t.Errorf("log line %s, want outcome client_gone", line)
		}
		noFailures(t, srv, "a")
		noFailures(t, srv, "b")
	})

	t.Run("client half-closes mid-body", func(t *testing.T) {
		// An EOF while the body is still due is a client that left, not
		// a half-close after a complete request.
		srv, logs := bodyGateway(t, time.Minute, "")
		c, _ := h1Dial(t, srv)
		io.WriteString(c, head+"5\r\nhello\r\n")
		_ = c.(*net.TCPConn).CloseWrite()
		if line := forwardLine(t, logs); !strings.Contains(line, `"outcome":"client_gone"`) {
			t.Errorf("log line %s, want outcome client_gone", line)
		}
		noFailures(t, srv, "a")
		noFailures(t, srv, "b")
	})
}

// TestForwardStallWhileUploading: the stall clock of an answer that began
// before the client finished its body does not run while the client is
// still sending it (the target may wait for the rest); a client body
// that then stalls is the client's, not the upstream's slow_body.
func TestForwardStallWhileUploading(t *testing.T) {
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		// An early answer's head and first chunk, then the rest of the
		// body only once the request body has ended. One answer per
		// connection, so it must not be reused.
		io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if line == "0\r\n" {
				break
			}
		}
		io.WriteString(c, "1\r\nb\r\n0\r\n\r\n")
	})
	srv, logs := newGateway(t, "stall.toml", "allow_private_destinations = true\n"+listenConf("")+
		"[slow_body]\nstall = \"200ms\"\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	srv.h1.bodyIdle = time.Second
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	head := fmt.Sprintf("POST http://%s/ HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n", rt.Addr(), rt.Addr())

	t.Run("slow upload", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		io.WriteString(c, head)
		for range 5 { // 600 ms of upload, each pause longer than the stall
			fmt.Fprint(c, "1\r\nx\r\n")
			time.Sleep(300 * time.Millisecond)
		}
		io.WriteString(c, "0\r\n\r\n")
		r, body := h1Read(t, br, http.MethodPost)
		if r.StatusCode != http.StatusOK || body != "ab" {
			t.Fatalf("answer %d %q, want 200 \"ab\"", r.StatusCode, body)
		}
		noFailures(t, srv, "up")
	})

	t.Run("upload stalls", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		io.WriteString(c, head+"1\r\nx\r\n") // then silence
		r, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
		if err != nil || r.StatusCode != http.StatusOK {
			t.Fatalf("answer %v %v, want the target's 200", statusOf(r), err)
		}
		if b, err := io.ReadAll(r.Body); err == nil {
			t.Errorf("the answer ended cleanly (%q) though its body was cut", b)
		}
		noFailures(t, srv, "up")
		eventually(t, "the request's log line", func() bool {
			return strings.Contains(logs.String(), `"outcome":"bad_request"`)
		})
	})
}

// TestClientBodyFault pins how a client body's read errors are sorted,
// with net/http's own error for a malformed chunk-size line.
func TestClientBodyFault(t *testing.T) {
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	_, chunkErr := io.ReadAll(req.Body)
	if chunkErr == nil {
		t.Fatal("a chunk-size line zz read without error")
	}
	for _, tc := range []struct {
		name string
		err  error
		want clientBodyFault
	}{
		{"bad chunk size", chunkErr, bodyMalformed},
		{"idle limit", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, bodyStalled},
		{"ended early", io.ErrUnexpectedEOF, bodyGone},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, bodyGone},
		{"closed by rotor", net.ErrClosed, bodyGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (&clientBodyError{err: tc.err}).fault(); got != tc.want {
				t.Errorf("fault(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}

// TestForwardStallClockStopsWhileClientLags: the stall clock measures the
// upstream side only. While rotor waits to write to a client that lags
// behind (a full socket), the upstream is not silent, it is held back;
// the answer must arrive whole and nothing is reported against it.
func TestForwardStallClockStopsWhileClientLags(t *testing.T) {
	const size = 16 << 20
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n", size)
		chunk := bytes.Repeat([]byte("z"), 64<<10)
		for n := 0; n < size; n += len(chunk) {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	srv, _ := newGateway(t, "lag.toml", "allow_private_destinations = true\n"+listenConf("")+
		"[slow_body]\nstall = \"200ms\"\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "GET http://%s/big HTTP/1.1\r\nHost: %s\r\n\r\n", rt.Addr(), rt.Addr())
	r, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("answer %v %v", statusOf(r), err)
	}
	time.Sleep(time.Second) // the client lags: five stall periods
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil || n != size {
		t.Fatalf("read %d of %d bytes: %v", n, size, err)
	}
	noFailures(t, srv, "up")
}
