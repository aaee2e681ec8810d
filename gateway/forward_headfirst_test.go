package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream"
)

// TestForwardHeadBeforeSlowBody: a target that sends its head and then
// waits before its body (a slow body, SSE, a long poll) has the head
// reach the client before it sends the body, on both forward paths (GET:
// the lean client, POST: the Transport). rotor held the head back until
// the first body byte (curl's time_starttransfer 8 s through rotor, 1 ms
// through squid; python's stream=True read timeout fired). The target
// sends the rest only once the client has the head (and the bytes that
// came with it), so on the old code this waits until the client's
// deadline and fails.
func TestForwardHeadBeforeSlowBody(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\n"
	for _, tc := range []struct {
		name        string
		first, rest string // the target's bytes before and after the client has the head
		early       string // the body bytes the client must have before the rest is sent
		want        string // the whole body
	}{
		{"sized", head + "Content-Length: 5\r\n\r\n", "hello", "", "hello"},
		{"chunked", head + "Transfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n", "", "hello"},
		{"chunk size line cut", head + "Transfer-Encoding: chunked\r\n\r\n5", "\r\nhello\r\n0\r\n\r\n", "", "hello"},
		{"chunk without its data", head + "Transfer-Encoding: chunked\r\n\r\n5\r\n", "hello\r\n0\r\n\r\n", "", "hello"},
		{"close-delimited", head + "Connection: close\r\n\r\n", "hello", "", "hello"},
		{"sized, part of it at once", head + "Content-Length: 10\r\n\r\nhello", "world", "hello", "helloworld"},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+" "+method, func(t *testing.T) {
				release, quit := make(chan struct{}), make(chan struct{})
				target := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err != nil {
						return
					}
					if _, err := io.WriteString(c, tc.first); err != nil {
						return
					}
					select {
					case <-release:
						_, _ = io.WriteString(c, tc.rest)
					case <-quit:
					}
				})
				t.Cleanup(func() { close(quit) }) // runs before the target's cleanup
				srv := directGateway(t)
				c, br := h1Dial(t, srv)
				cl := ""
				if method == http.MethodPost {
					cl = "Content-Length: 0\r\n"
				}
				fmt.Fprintf(c, "%s http://%s/slow HTTP/1.1\r\nHost: %s\r\n%s\r\n", method, target.Addr(), target.Addr(), cl)
				resp, err := http.ReadResponse(br, &http.Request{Method: method})
				if err != nil {
					t.Fatalf("no head before the body was sent: %v", err)
				}
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %s, want 200", resp.Status)
				}
				got := make([]byte, len(tc.early))
				if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != tc.early {
					t.Fatalf("body before the rest was sent: %q %v, want %q", got, err, tc.early)
				}
				close(release)
				rest, err := io.ReadAll(resp.Body)
				if err != nil || string(got)+string(rest) != tc.want {
					t.Fatalf("body %q %v, want %q", string(got)+string(rest), err, tc.want)
				}
			})
		}
	}
}

// writeCounter records the writes to a client's connection.
type writeCounter struct {
	buf    bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.buf.Write(p)
}

// upstreamBytes is what a lean client's connection reads from the
// upstream: first, then rest on the next read, which notes whether the
// client had the head by then (the read would wait for the upstream).
type upstreamBytes struct {
	parts  []string
	client *writeCounter
	// headFirst: when the connection was read past first, the head had
	// been written to the client.
	headFirst bool
}

func (u *upstreamBytes) Read(p []byte) (int, error) {
	if len(u.parts) == 0 {
		return 0, io.EOF
	}
	if len(u.parts) == 1 {
		u.headFirst = strings.HasPrefix(u.client.buf.String(), "HTTP/1.1 200 OK\r\n")
	}
	n := copy(p, u.parts[0])
	u.parts[0] = u.parts[0][n:]
	if u.parts[0] == "" {
		u.parts = u.parts[1:]
	}
	return n, nil
}

// TestWriteResponseHeadWithBody: writeResponse sends the head ahead of
// the body only when the body's first read would wait for the upstream.
// A small answer whose body came with its head (the common case, issue
// #8) still reaches the client in one write; one whose body is not there
// yet has its head written before the upstream is read again.
func TestWriteResponseHeadWithBody(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\n"
	for _, tc := range []struct {
		name      string
		method    string
		parts     []string // the upstream's bytes, one read each
		writes    int      // writes to the client, 0: not checked
		headFirst bool
		body      string // what the client gets
	}{
		{"sized, whole", "GET", []string{head + "Content-Length: 5\r\n\r\nhello"}, 1, false, "hello"},
		{"chunked, whole", "GET", []string{head + "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"}, 1, false, "hello"},
		{"chunked, last chunk with a trailer", "GET", []string{head + "Transfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n\r\n"}, 1, false, ""},
		{"close-delimited, whole", "GET", []string{head + "Connection: close\r\n\r\nhello"}, 0, false, "hello"},
		{"no body", "GET", []string{head + "Content-Length: 0\r\n\r\n"}, 1, false, ""},
		{"HEAD", "HEAD", []string{head + "Content-Length: 5\r\n\r\n"}, 1, false, ""},
		{"sized, body later", "GET", []string{head + "Content-Length: 5\r\n\r\n", "hello"}, 0, true, "hello"},
		{"chunked, body later", "GET", []string{head + "Transfer-Encoding: chunked\r\n\r\n", "5\r\nhello\r\n0\r\n\r\n"}, 0, true, "hello"},
		{"chunked, data later", "GET", []string{head + "Transfer-Encoding: chunked\r\n\r\n5\r\n", "hello\r\n0\r\n\r\n"}, 0, true, "hello"},
		{"chunked, trailer later", "GET", []string{head + "Transfer-Encoding: chunked\r\n\r\n0\r\n", "\r\n"}, 0, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := &writeCounter{}
			up := &upstreamBytes{parts: tc.parts, client: client}
			ubr := bufio.NewReader(up)
			req := &http.Request{Method: tc.method, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{}}
			resp, err := http.ReadResponse(ubr, req)
			if err != nil {
				t.Fatal(err)
			}
			c1, c2 := net.Pipe()
			t.Cleanup(func() { c1.Close(); c2.Close() })
			resp.Body = &fwdBody{pc: &fwdConn{c: c1, br: ubr}, body: resp.Body, stop: func() bool { return false }}
			hc := &h1Conn{bw: bufio.NewWriterSize(client, h1BufSize)}
			w := &h1Writer{hc: hc, req: req, h: http.Header{}, cl: -1}
			_, _, err = (*Server)(nil).writeResponse(w, resp, &upstream.Endpoint{Name: "up"}, 0, func() bool { return false })
			if err != nil {
				t.Fatalf("writeResponse: %v", err)
			}
			w.finish()
			if tc.writes > 0 && client.writes != tc.writes {
				t.Errorf("%d writes to the client, want %d:\n%s", client.writes, tc.writes, client.buf.String())
			}
			if up.headFirst != tc.headFirst {
				t.Errorf("head written before the upstream was read again: %v, want %v", up.headFirst, tc.headFirst)
			}
			got, err := http.ReadResponse(bufio.NewReader(&client.buf), req)
			if err != nil {
				t.Fatalf("the client's answer: %v", err)
			}
			if b, err := io.ReadAll(got.Body); err != nil || got.StatusCode != 200 || string(b) != tc.body {
				t.Errorf("the client's answer: %s %q %v, want 200 %q", got.Status, b, err, tc.body)
			}
		})
	}
}
