package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// h1Dial opens a raw connection to the gateway's HTTP front.
func h1Dial(t *testing.T, srv *Server) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// h1Read reads one answer to a request with method.
func h1Read(t *testing.T, br *bufio.Reader, method string) (*http.Response, string) {
	t.Helper()
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

// wantClosed checks that the gateway closes c (EOF, not a reset) within 5s.
func wantClosed(t *testing.T, c net.Conn, br *bufio.Reader) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := br.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("connection not closed cleanly: read %d, %v", n, err)
	}
}

// The HTTP front's own keep-alive loop frames answers as net/http's
// Server did: keep-alive and pipelining on HTTP/1.1, Connection handling
// for HTTP/1.0, Content-Length on small answers, no body for HEAD.
func TestH1Framing(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv := directGateway(t)
	get := func(path, proto, extra string) string {
		return fmt.Sprintf("GET %s %s\r\nHost: %s\r\n%s\r\n", target.URL(path), proto, target.Addr(), extra)
	}

	t.Run("keep-alive and pipelining", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		// Two requests in one write, then a third after the answers.
		fmt.Fprint(c, get("/ok", "HTTP/1.1", "")+get("/status/404", "HTTP/1.1", ""))
		r1, b1 := h1Read(t, br, "GET")
		r2, b2 := h1Read(t, br, "GET")
		if r1.StatusCode != 200 || b1 != "ok\n" || r2.StatusCode != 404 || b2 != "status 404\n" {
			t.Fatalf("pipelined answers: %d %q, %d %q", r1.StatusCode, b1, r2.StatusCode, b2)
		}
		// An empty line before a request line is ignored (RFC 9112 section 2.2).
		fmt.Fprint(c, "\r\n"+get("/ok", "HTTP/1.1", ""))
		if r3, b3 := h1Read(t, br, "GET"); r3.StatusCode != 200 || b3 != "ok\n" || r3.Close {
			t.Fatalf("third answer on the kept-alive connection: %d %q close=%v", r3.StatusCode, b3, r3.Close)
		}
		if r1.Header.Get("X-Rotor-Upstream") != "up" || r1.Header.Get("Date") == "" {
			t.Errorf("answer headers: %v", r1.Header)
		}
	})

	t.Run("Connection: close", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		fmt.Fprint(c, get("/ok", "HTTP/1.1", "Connection: close\r\n"))
		if r, b := h1Read(t, br, "GET"); r.StatusCode != 200 || b != "ok\n" || !r.Close {
			t.Fatalf("answer: %d %q close=%v, want 200 with Connection: close", r.StatusCode, b, r.Close)
		}
		wantClosed(t, c, br)
	})

	t.Run("HTTP/1.0", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		fmt.Fprint(c, get("/ok", "HTTP/1.0", "Connection: keep-alive\r\n"))
		r, b := h1Read(t, br, "GET")
		if r.StatusCode != 200 || b != "ok\n" || r.Header.Get("Connection") != "keep-alive" {
			t.Fatalf("HTTP/1.0 keep-alive: %d %q Connection %q", r.StatusCode, b, r.Header.Get("Connection"))
		}
		fmt.Fprint(c, get("/ok", "HTTP/1.0", ""))
		if r, b := h1Read(t, br, "GET"); r.StatusCode != 200 || b != "ok\n" || !r.Close {
			t.Fatalf("HTTP/1.0 without keep-alive: %d %q close=%v", r.StatusCode, b, r.Close)
		}
		wantClosed(t, c, br)
	})

	t.Run("HEAD", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "HEAD %s HTTP/1.1\r\nHost: %s\r\n\r\n", target.URL("/ok"), target.Addr())
		r, b := h1Read(t, br, "HEAD")
		if r.StatusCode != 200 || b != "" || r.ContentLength != 3 {
			t.Fatalf("HEAD: %d body %q Content-Length %d, want 200, no body, 3", r.StatusCode, b, r.ContentLength)
		}
		// The next answer on the connection must not be shifted by a body.
		fmt.Fprint(c, get("/status/201", "HTTP/1.1", ""))
		if r, b := h1Read(t, br, "GET"); r.StatusCode != 201 || b != "status 201\n" {
			t.Fatalf("after HEAD: %d %q", r.StatusCode, b)
		}
	})

	t.Run("rotor's own errors have a length", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "GET /not-a-proxy-request HTTP/1.1\r\nHost: x\r\n\r\n")
		r, b := h1Read(t, br, "GET")
		if r.StatusCode != 400 || r.ContentLength != int64(len(b)) || len(r.TransferEncoding) != 0 {
			t.Fatalf("error answer: %d Content-Length %d TE %v body %q", r.StatusCode, r.ContentLength, r.TransferEncoding, b)
		}
	})
}

// An upstream answer without a length reaches an HTTP/1.1 client chunked
// and an HTTP/1.0 client close-delimited, whole either way.
func TestH1StreamedAnswers(t *testing.T) {
	body := strings.Repeat("0123456789", 1000) // past h1SmallBody
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		for {
			if _, err := rt.readHead(br); err != nil {
				return
			}
			fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", len(body), body)
		}
	})
	srv := directGateway(t)
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "GET http://%s/ %s\r\nHost: %s\r\n\r\n", rt.Addr(), proto, rt.Addr())
		r, b := h1Read(t, br, "GET")
		if r.StatusCode != 200 || b != body {
			t.Fatalf("%s: %d, %d body bytes, want 200 and %d", proto, r.StatusCode, len(b), len(body))
		}
		chunked := len(r.TransferEncoding) == 1 && r.TransferEncoding[0] == "chunked"
		if proto == "HTTP/1.1" && !chunked {
			t.Errorf("HTTP/1.1: Transfer-Encoding %v, want chunked", r.TransferEncoding)
		}
		if proto == "HTTP/1.0" {
			if chunked || !r.Close {
				t.Errorf("HTTP/1.0: Transfer-Encoding %v close=%v, want close-delimited", r.TransferEncoding, r.Close)
			}
			wantClosed(t, c, br)
		}
	}
}

// Requests net/http's Server refused are refused the same way, each with
// X-Rotor-Error: bad_request and a one-line reason (rotor used to answer
// a bare "400 Bad Request"). The rows after the first pin net/http's
// parse error texts (requestParseErrors) and rotor's own checks.
func TestH1BadRequests(t *testing.T) {
	srv := directGateway(t)
	for _, tt := range []struct {
		name, req string
		status    int
		reason    string
	}{
		{"garbage", "\x17\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n", 400, "malformed request line"},
		// The parser splits at the first two spaces: a third one made it
		// "malformed HTTP version".
		{"two spaces after the method", "GET  http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "malformed request line"},
		{"space in the target", "GET http://a.test/a b HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "malformed request line"},
		// A stray "%" is forwarded as sent in a line of up to 4 KiB.
		{"stray percent in a line over 4 KiB", "GET http://a.test/50%-off/" + strings.Repeat("a", 4<<10) + " HTTP/1.1\r\nHost: a.test\r\n\r\n", 400,
			"a request line over 4 KiB with a '%' not followed by two hex digits in its path: encode it as %25"},
		{"stray percent in the host of a line over 4 KiB", "GET http://a%zz.test/" + strings.Repeat("a", 4<<10) + " HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "malformed request target"},
		{"invalid method", "G(T http://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "invalid method"},
		{"bad version", "GET http://a.test/ HTTX/1.1\r\nHost: a.test\r\n\r\n", 400, "malformed HTTP version"},
		{"bad target", "GET http://a.test/\x7f HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "malformed request target"},
		// CONNECT takes host:port alone: a userinfo or a path was dropped
		// by the parser and the tunnel opened anyway.
		{"CONNECT with userinfo", "CONNECT u:secret@127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n", 400, "CONNECT needs host:port"},
		{"CONNECT with a path", "CONNECT 127.0.0.1:9/x HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n", 400, "CONNECT needs host:port"},
		{"stray percent in the host", "GET http://a%zz.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n", 400, "malformed request target"},
		{"no Host on HTTP/1.1", "GET /x HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"no Host on HTTP/1.1, absolute form", "GET http://a.test/ HTTP/1.1\r\n\r\n", 400, "missing required Host header"},
		{"no Host on HTTP/1.1, Host-like fields", "GET http://a.test/ HTTP/1.1\r\nX-Host: a.test\r\nHostname: a.test\r\n\r\n", 400, "missing required Host header"},
		{"two Hosts", "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n", 400, "more than one Host header"},
		{"space before the colon", "GET http://a.test/ HTTP/1.1\r\nHost : a.test\r\n\r\n", 400, "invalid header name"},
		{"bad header name", "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nBad Name: x\r\n\r\n", 400, "invalid header name"},
		{"control byte in a value", "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-A: a\x01b\r\n\r\n", 400, "malformed header line"},
		{"no colon", "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nNoColon\r\n\r\n", 400, "malformed header line"},
		{"bad Content-Length", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: abc\r\n\r\n", 400, "invalid Content-Length"},
		{"negative Content-Length", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: -1\r\n\r\n", 400, "invalid Content-Length"},
		{"empty Content-Length", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: \r\n\r\n", 400, "invalid Content-Length"},
		{"two Content-Lengths", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400, "conflicting Content-Length"},
		{"unknown transfer coding", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip\r\n\r\n", 501, "unsupported Transfer-Encoding"},
		{"gzip, chunked", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501, "unsupported Transfer-Encoding"},
		{"two Transfer-Encodings", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501, "unsupported Transfer-Encoding"},
		{"HTTP/2 request line", "GET http://a.test/ HTTP/2.0\r\nHost: a.test\r\n\r\n", 505, "HTTP/1.1"},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, "HTTP/1.1"},
		{"Expect other than 100-continue, no body", "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nExpect: magic\r\n\r\n", 417, "100-continue"},
		{"Expect with another member", "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nExpect: 100-continue, magic\r\n\r\n", 417, "100-continue"},
		{"Expect in a second field", "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\nExpect: 100-continue\r\nExpect: magic\r\n\r\n", 417, "100-continue"},
		{"Expect other than 100-continue", "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nExpect: magic\r\nContent-Length: 3\r\n\r\nabc", 417, "100-continue"},
		{"head too large", "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nX-Big: " + strings.Repeat("z", 80<<10) + "\r\n\r\n", 431, "larger than 68 KiB"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			fmt.Fprint(c, tt.req)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			b, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatalf("reading the reason: %v", err)
			}
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (%q), want %d", resp.StatusCode, b, tt.status)
			}
			if got := resp.Header.Get("X-Rotor-Error"); got != "bad_request" {
				t.Errorf("X-Rotor-Error %q, want bad_request", got)
			}
			if !strings.Contains(string(b), tt.reason) || strings.Count(string(b), "\n") != 1 {
				t.Errorf("reason %q, want one line with %q", b, tt.reason)
			}
			if !resp.Close {
				t.Errorf("the answer keeps the connection open")
			}
		})
	}
}

// A client that sends "Expect: 100-continue" gets the interim answer once
// the body is wanted, then the final one.
func TestH1ExpectContinue(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv := directGateway(t)
	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n", target.URL("/echo"), target.Addr())
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("interim answer: %q, %v", line, err)
	}
	if blank, _ := br.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("interim answer not ended: %q", blank)
	}
	fmt.Fprint(c, "hello")
	if r, b := h1Read(t, br, "POST"); r.StatusCode != 200 || b != "hello" {
		t.Fatalf("final answer: %d %q", r.StatusCode, b)
	}
}

// An answer given without reading the request's body (here 407) still
// reaches the client: the connection is closed after it without a reset.
func TestH1UnreadBodyLingers(t *testing.T) {
	srv, _ := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[[client]]\nusername = \"u\"\npassword = \"pw-h1\"\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	c, br := h1Dial(t, srv)
	big := strings.Repeat("x", 256<<10)
	go func() { // owner: this test; ends when the write completes or the conn closes
		fmt.Fprintf(c, "POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nContent-Length: %d\r\n\r\n%s", len(big), big)
	}()
	r, _ := h1Read(t, br, "POST")
	if r.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("status %d, want 407", r.StatusCode)
	}
}

// Shutdown closes kept-alive connections that wait for a request, and
// lets one in the middle of a request finish its answer.
func TestH1ShutdownClosesIdle(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv := directGateway(t)
	idle, ibr := h1Dial(t, srv)
	fmt.Fprintf(idle, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target.URL("/ok"), target.Addr())
	h1Read(t, ibr, "GET")
	busy, bbr := h1Dial(t, srv)
	fmt.Fprintf(busy, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target.URL("/delay/300ms"), target.Addr())
	time.Sleep(100 * time.Millisecond) // the request is in the handler
	done := make(chan error, 1)
	go func() { // owner: this test; ends when Shutdown returns
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- srv.Shutdown(ctx)
	}()
	wantClosed(t, idle, ibr)
	if r, b := h1Read(t, bbr, "GET"); r.StatusCode != 200 || b != "ok\n" {
		t.Fatalf("the answer in flight at shutdown: %d %q", r.StatusCode, b)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown did not return")
	}
}

// A request head over h1MaxHeader gets 431 whether it is one long line
// or many short ones (where the limit cuts a line in two and the parser
// sees a malformed line), and the connection closes without a reset: the
// rest of the head is drained so the client reads the answer.
func TestH1HeadTooLarge(t *testing.T) {
	srv := patientGateway(t) // 100 KB of fields
	for _, tc := range []struct{ name, fields string }{
		{"one long line", "X-Big: " + strings.Repeat("z", 80<<10) + "\r\n"},
		{"many short lines", strings.Repeat("X-Short: abcdefghijklmnopqrstuvwxyz\r\n", 3000)},
		{"many short lines, no value", strings.Repeat("X-S:\r\n", 20000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			if _, err := fmt.Fprintf(c, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n%s\r\n", tc.fields); err != nil {
				t.Fatal(err)
			}
			r, _ := h1Read(t, br, "GET")
			if r.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !r.Close {
				t.Fatalf("status %d close=%v, want 431 closing the connection", r.StatusCode, r.Close)
			}
			wantClosed(t, c, br)
		})
	}
}

// A request with both Content-Length and Transfer-Encoding is answered and
// the connection closed (RFC 9112 section 6.1: a smuggling guard): what
// follows it is not read as another request. rotor used to keep the
// connection alive. An HTTP/1.0 one with Transfer-Encoding is refused
// (TestH1HTTP10TransferEncodingRefused).
func TestH1AmbiguousFramingCloses(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv := directGateway(t)
	bigFields := strings.Repeat("X-Pad: "+strings.Repeat("p", 100)+"\r\n", 80) // 8 KiB, past h1BufSize
	for _, tc := range []struct{ name, req, want string }{
		{"Content-Length and chunked", fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", target.URL("/echo")), "hello"},
		{"chunked and Content-Length", fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n", target.URL("/echo")), "hello"},
		{"both, past the read buffer", fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", target.URL("/echo"), bigFields), "hello"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			// A second request after it must not be answered.
			io.WriteString(c, tc.req+fmt.Sprintf("GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target.URL("/ok")))
			r, body := h1Read(t, br, http.MethodPost)
			if r.StatusCode != http.StatusOK || body != tc.want {
				t.Fatalf("answer %d %q, want 200 %q", r.StatusCode, body, tc.want)
			}
			if !r.Close {
				t.Errorf("the answer keeps the connection open")
			}
			wantClosed(t, c, br)
		})
	}
	// Either field alone keeps the connection, in a head longer than the
	// connection's read buffer too (its fields are seen as they are read).
	for _, fields := range []string{"", bigFields} {
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\n%sTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", target.URL("/echo"), fields)
		if r, body := h1Read(t, br, http.MethodPost); r.StatusCode != http.StatusOK || body != "hello" || r.Close {
			t.Fatalf("chunked alone after %d bytes of fields: %d %q close=%v, want 200 kept alive", len(fields), r.StatusCode, body, r.Close)
		}
	}
}

// An HTTP/1.1 request in absolute form must carry a Host field too (RFC
// 9112 section 3.2; its value is ignored for the URI's), rotor used to
// take the URI's host for one. HTTP/1.0 needs none, and CONNECT is let
// through without one as net/http's Server does (golang/go#18215: iOS
// and old wget send none; curl, Go, wget 1.21 and Python's http.client
// do).
func TestH1HostHeader(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv := directGateway(t)
	for _, tc := range []struct{ name, req string }{
		{"HTTP/1.0 without Host", "GET " + target.URL("/ok") + " HTTP/1.0\r\n\r\n"},
		{"an empty Host", "GET " + target.URL("/ok") + " HTTP/1.1\r\nHost:\r\n\r\n"},
		{"another host in Host", "GET " + target.URL("/ok") + " HTTP/1.1\r\nhost: elsewhere.test\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			io.WriteString(c, tc.req)
			if r, b := h1Read(t, br, "GET"); r.StatusCode != http.StatusOK || b != "ok\n" {
				t.Fatalf("answer %d %q (X-Rotor-Error %q), want 200", r.StatusCode, b, r.Header.Get("X-Rotor-Error"))
			}
		})
	}
	t.Run("CONNECT without Host", func(t *testing.T) {
		c, br := h1Dial(t, srv)
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target.Addr())
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("answer %v, %v, want 200", resp, err)
		}
		fmt.Fprintf(c, "GET /ok HTTP/1.1\r\nHost: %s\r\n\r\n", target.Addr())
		if r, b := h1Read(t, br, "GET"); r.StatusCode != http.StatusOK || b != "ok\n" {
			t.Fatalf("through the tunnel: %d %q", r.StatusCode, b)
		}
	})
}

// TestHeadScan pins what the scan of a head's bytes finds, fed whole and
// a byte at a time (a head arrives in pieces): the fields http.ReadRequest
// hides, named as sent, in the head only.
func TestHeadScan(t *testing.T) {
	for _, tc := range []struct {
		head              string
		host, cl, te, end bool
	}{
		{"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx", true, true, false, true},
		{"POST / HTTP/1.1\r\nHost: x\r\nTRANSFER-ENCODING: chunked\r\nContent-Length: 1\r\n\r\n", true, true, true, true},
		{"POST / HTTP/1.1\nhost: x\nTransfer-Encoding: chunked\n\n", true, false, true, true},
		{"GET / HTTP/1.1\r\nHost: x\r\nX-Note: Content-Length: 1\r\n\r\n", true, false, false, true},
		{"POST / HTTP/1.1\r\nHost: x\r\n\r\nContent-Length: 1\r\n\r\n", true, false, false, true}, // in the body
		{"POST / HTTP/1.1\r\nContent-Length: 1\r\n", false, true, false, false},
		{"GET http://a.test/ HTTP/1.1\r\nX-Host: a.test\r\nHostname: a\r\n\r\nHost: b\r\n", false, false, false, true},
		{"\r\n\r\nGET http://a.test/ HTTP/1.1\r\nHost:\r\n\r\n", true, false, false, true}, // empty lines first; an empty Host
		{"GET http://host:80/ HTTP/1.1\r\nX-Transfer-Encoding-Is-Long: chunked\r\n\r\n", false, false, false, true},
		{"GET http://a.test/ HT", false, false, false, false},
	} {
		for _, step := range []int{len(tc.head), 1} {
			var h headScan
			for b := []byte(tc.head); len(b) > 0; b = b[min(step, len(b)):] {
				h.feed(b[:min(step, len(b))])
			}
			if h.host != tc.host || h.cl != tc.cl || h.te != tc.te || (h.state == scanDone) != tc.end || !h.started() {
				t.Errorf("scan of %q by %d: host %v cl %v te %v end %v, want %v %v %v %v",
					tc.head, step, h.host, h.cl, h.te, h.state == scanDone, tc.host, tc.cl, tc.te, tc.end)
			}
		}
	}
	var h headScan
	if h.feed([]byte("\r\n\n")); h.started() {
		t.Errorf("empty lines started a head")
	}
}
