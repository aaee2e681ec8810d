package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// stallGateway starts a gateway with one direct:// upstream named "up"
// and slow_body.stall = 300ms.
func stallGateway(t *testing.T) *Server {
	t.Helper()
	srv, _ := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[slow_body]\nstall = \"300ms\"\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n")
	return srv
}

// forwardMethods are a request that takes the lean client (GET) and one
// that takes the endpoint's http.Transport (POST).
var forwardMethods = []string{http.MethodGet, http.MethodPost}

// askForward sends one absolute-form request with method to target over
// a raw connection and returns the final answer's head (past the interim
// answers rotor relays), the body bytes read and the error that ended the
// body (nil at a proper end).
func askForward(t *testing.T, srv *Server, method, uri string) (*http.Response, string, error) {
	t.Helper()
	c, br := h1Dial(t, srv)
	host := strings.SplitN(strings.TrimPrefix(uri, "http://"), "/", 2)[0]
	cl := ""
	if method == http.MethodPost {
		cl = "Content-Length: 0\r\n"
	}
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", method, uri, host, cl)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	for err == nil && resp.StatusCode > http.StatusSwitchingProtocols && resp.StatusCode < http.StatusOK {
		resp, err = http.ReadResponse(br, &http.Request{Method: method})
	}
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, uri, err)
	}
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// TestForwardTruncatedBodyStaysTruncated: an upstream body that ends
// before its end (EOF inside the chunked framing, or silent for
// slow_body.stall) reaches the client as truncated: the head and the
// bytes that came, then the connection closes without the last chunk and
// without a Content-Length made up from what arrived, as squid does. A
// client must not take a partial download for a whole one (curl rc=18).
func TestForwardTruncatedBodyStaysTruncated(t *testing.T) {
	big := strings.Repeat("0123456789", 500) // past h1SmallBody
	for _, tc := range []struct {
		name   string
		answer string
		stall  bool // the target holds the connection open instead of closing it
		want   string
	}{
		{"small body, EOF inside a chunk",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n10\r\nabc", false, "12345678abc"},
		{"small body, EOF between chunks",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n", false, "12345678"},
		{"EOF before any body byte",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, ""},
		{"large body, EOF inside a chunk",
			fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n10\r\nabc", len(big), big), false, big + "abc"},
		{"small body, stalled",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n", true, "12345678"},
		{"large body, stalled",
			fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n", len(big), big), true, big},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err != nil {
						return
					}
					_, _ = io.WriteString(c, tc.answer)
					if tc.stall {
						_, _ = io.Copy(io.Discard, br) // until rotor closes
					}
				})
				srv := stallGateway(t)
				resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
				if resp.StatusCode != 200 {
					t.Fatalf("status %d, want the target's 200", resp.StatusCode)
				}
				if err == nil {
					t.Errorf("the body ended cleanly after %d bytes (Content-Length %d, Transfer-Encoding %v): a truncated answer looks whole",
						len(body), resp.ContentLength, resp.TransferEncoding)
				}
				if resp.ContentLength >= 0 {
					t.Errorf("Content-Length %d made up for a body that did not end", resp.ContentLength)
				}
				if body != tc.want {
					t.Errorf("got %d body bytes, want the %d that came", len(body), len(tc.want))
				}
				if tc.stall {
					snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
					if snap.Failures[health.SlowBody] != 1 {
						t.Errorf("failures %v, want one slow_body", snap.Failures)
					}
				}
			})
		}
	}
}

// TestForwardTruncatedBodyResetsHTTP10: to an HTTP/1.0 client an answer
// without a length is close-delimited, so a cut upstream body ends with a
// reset, not a close the client would take for the body's end (curl exit
// 0 with a partial body).
func TestForwardTruncatedBodyResetsHTTP10(t *testing.T) {
	big := strings.Repeat("0123456789", 500) // past h1SmallBody
	for _, tc := range []struct {
		name   string
		answer string
	}{
		{"small body", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n10\r\nabc"},
		{"large body", fmt.Sprintf("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n10\r\nabc", len(big), big)},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err == nil {
						_, _ = io.WriteString(c, tc.answer)
					}
				})
				srv := stallGateway(t)
				c, br := h1Dial(t, srv)
				cl := ""
				if method == http.MethodPost {
					cl = "Content-Length: 0\r\n"
				}
				fmt.Fprintf(c, "%s http://%s/ HTTP/1.0\r\n%s\r\n", method, rt.Addr(), cl)
				resp, err := http.ReadResponse(br, &http.Request{Method: method})
				if err != nil {
					// The reset may destroy the head in flight too: an error all the same.
					return
				}
				if resp.StatusCode != 200 || resp.ContentLength >= 0 {
					t.Fatalf("status %d Content-Length %d, want the target's 200 close-delimited", resp.StatusCode, resp.ContentLength)
				}
				b, err := io.ReadAll(resp.Body)
				if err == nil {
					t.Errorf("the close-delimited body ended cleanly after %d bytes: a truncated answer looks whole", len(b))
				}
			})
		}
	}
}

// TestForwardWholeBodiesEndCleanly: whole bodies still end cleanly on both
// paths, small ones on the lean client's with a Content-Length. The
// Transport's (POST) go chunked: rotor cannot see whether their body came
// with the head, so it sends the head first (bodyReady) and the length is
// not known then.
func TestForwardWholeBodiesEndCleanly(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"))
	srv := stallGateway(t)
	for _, method := range forwardMethods {
		resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
		if err != nil || resp.StatusCode != 200 || body != "abc" || (method == http.MethodGet && resp.ContentLength != 3) {
			t.Errorf("%s: %d %q Content-Length %d err %v, want 200 \"abc\" (with a length for GET)", method, resp.StatusCode, body, resp.ContentLength, err)
		}
	}
	noFailures(t, srv, "up")
}

// TestForwardResponseHeadTooLarge: a target answering with more than
// fwdMaxResponseHead of header gets the client a 502 that says so, and
// rotor does not buffer it; the upstream is not blamed (it relayed the
// target faithfully): it stays eligible.
func TestForwardResponseHeadTooLarge(t *testing.T) {
	for _, shape := range []string{"many lines", "one line"} {
		for _, method := range forwardMethods {
			t.Run(shape+"/"+method, func(t *testing.T) {
				rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err != nil {
						return
					}
					bw := bufio.NewWriter(c)
					_, _ = bw.WriteString("HTTP/1.1 200 OK\r\n")
					if shape == "one line" {
						_, _ = bw.WriteString("X-Pad: ")
					}
					line := strings.Repeat("p", 1000)
					for range 4 << 10 { // 4 MiB, under net/http's default 10 MB limit
						if shape == "many lines" {
							_, _ = bw.WriteString("X-Pad: ")
						}
						if _, err := bw.WriteString(line); err != nil {
							return
						}
						if shape == "many lines" {
							_, _ = bw.WriteString("\r\n")
						}
					}
					_, _ = bw.WriteString("\r\nContent-Length: 2\r\n\r\nok")
					_ = bw.Flush()
				})
				srv := stallGateway(t)
				resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusBadGateway {
					t.Fatalf("status %d (%d header fields), want 502", resp.StatusCode, len(resp.Header))
				}
				if got := resp.Header.Get("X-Rotor-Error"); !strings.HasPrefix(got, "target_unreachable; stage=first_byte; upstream=up") {
					t.Errorf("X-Rotor-Error %q, want a target failure behind upstream up", got)
				}
				if !strings.Contains(body, "header") {
					t.Errorf("reason %q does not say the header was too large", body)
				}
				snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
				if snap.State != health.Eligible {
					t.Errorf("upstream %s after a target's oversized header, want eligible", snap.State)
				}
			})
		}
	}
}

// TestForwardUnsolicited1xx: rotor strips Upgrade from requests, so a
// 101 can only come from a misbehaving target: the client gets a 502, not
// a "101" it would wait on for ever. Interim answers (102, 103) are
// relayed on both paths (TestForwardRelaysInterimAnswers), however many,
// as long as all the heads together stay within fwdMaxResponseHead.
func TestForwardUnsolicited1xx(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		wantStatus   int
		wantInBody   string
	}{
		{"101", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 502, "101"},
		{"101 without Connection", "HTTP/1.1 101 Switching Protocols\r\n\r\n", 502, "101"},
		{"interim answers then 200", strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 8) +
			"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok"},
		{"endless interim answers", strings.Repeat("HTTP/1.1 102 Processing\r\n\r\n", 2*fwdMaxResponseHead/26), 502, "header"},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err != nil {
						return
					}
					_, _ = io.WriteString(c, tc.answer)
					_, _ = io.Copy(io.Discard, br) // until rotor closes
				})
				srv := stallGateway(t)
				resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != tc.wantStatus || !strings.Contains(body, tc.wantInBody) {
					t.Fatalf("got %d %q, want %d and %q in the body", resp.StatusCode, body, tc.wantStatus, tc.wantInBody)
				}
				if tc.wantStatus == 502 {
					if got := resp.Header.Get("X-Rotor-Error"); !strings.HasPrefix(got, "target_unreachable; stage=first_byte; upstream=up") {
						t.Errorf("X-Rotor-Error %q, want a target failure behind upstream up", got)
					}
					snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
					if snap.State != health.Eligible {
						t.Errorf("upstream %s after a target's bad answer, want eligible", snap.State)
					}
				}
			})
		}
	}
}

// TestForwardInvalidResponse: a target answering with something that is
// not HTTP (garbage, a bad status line or version, conflicting or bad
// Content-Length, a header line without a colon, a transfer coding rotor
// cannot decode) gets the client a 502 saying so, not "the target is
// unreachable"; the upstream relayed it faithfully and is not cooled. The
// POST cases pin net/http's texts for the Transport (transportAnswerError).
func TestForwardInvalidResponse(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"garbage", "\x05\x00this is not HTTP\r\n\r\n"},
		{"no status code", "HTTP/1.1\r\n\r\n"},
		{"bad status code", "HTTP/1.1 abc OK\r\nContent-Length: 0\r\n\r\n"},
		{"bad version", "HTTX/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"conflicting Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd"},
		{"negative Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\nabc"},
		{"empty Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nabc"},
		{"header line without a colon", "HTTP/1.1 200 OK\r\nBad Header\r\n\r\n"},
		{"unknown transfer coding", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc"},
		{"two transfer codings", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
		{"trailer announcing Content-Length", "HTTP/1.1 200 OK\r\nTrailer: Content-Length\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"},
	} {
		for _, method := range forwardMethods {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
					if _, err := rt.readHead(br); err != nil {
						return
					}
					_, _ = io.WriteString(c, tc.answer)
					_, _ = io.Copy(io.Discard, br) // until rotor closes
				})
				srv := stallGateway(t)
				resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "the target sent an invalid HTTP response") ||
					strings.Contains(body, "unreachable") {
					t.Fatalf("got %d %q, want 502 saying the answer was invalid", resp.StatusCode, body)
				}
				if got := resp.Header.Get("X-Rotor-Error"); got != "target_unreachable; stage=first_byte; upstream=up" {
					t.Errorf("X-Rotor-Error %q, want a target failure behind upstream up", got)
				}
				snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
				if snap.State != health.Eligible {
					t.Errorf("upstream %s after a target's invalid answer, want eligible", snap.State)
				}
			})
		}
	}
	// A connection that ends before any answer is still that.
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) { _, _ = rt.readHead(br) })
	srv := stallGateway(t)
	for _, method := range forwardMethods {
		if resp, body, _ := askForward(t, srv, method, "http://"+rt.Addr()+"/"); resp.StatusCode != http.StatusBadGateway ||
			strings.Contains(body, "invalid") {
			t.Errorf("%s, no answer: %d %q, want 502 not calling it invalid", method, resp.StatusCode, body)
		}
	}
}

// TestForwardInvalidTargetIs400: a target no upstream could reach (empty
// host, port 0 or past 65535, a port that is not a number) is the
// client's error: 400 before any upstream is picked, not a 502 blaming
// the upstream.
func TestForwardInvalidTargetIs400(t *testing.T) {
	srv := directGateway(t)
	for _, req := range []string{
		"GET http://127.0.0.1:99999/ HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n",
		"GET http://127.0.0.1:0/ HTTP/1.1\r\nHost: 127.0.0.1:0\r\n\r\n",
		"GET http://:80/ HTTP/1.1\r\nHost: :80\r\n\r\n",
		"POST http://:80/ HTTP/1.1\r\nHost: :80\r\nContent-Length: 0\r\n\r\n",
		"CONNECT :80 HTTP/1.1\r\nHost: :80\r\n\r\n",
		"CONNECT 127.0.0.1:99999 HTTP/1.1\r\nHost: 127.0.0.1:99999\r\n\r\n",
		"CONNECT a.test:0 HTTP/1.1\r\nHost: a.test:0\r\n\r\n",
		"CONNECT a.test: HTTP/1.1\r\nHost: a.test:\r\n\r\n",
		"CONNECT a;b:443 HTTP/1.1\r\nHost: a;b:443\r\n\r\n",
		"CONNECT a\x80b:443 HTTP/1.1\r\nHost: a\x80b:443\r\n\r\n",
		"CONNECT [::1%25eth0]:443 HTTP/1.1\r\nHost: [::1%25eth0]:443\r\n\r\n",
		"GET http://a!b.test/ HTTP/1.1\r\nHost: a!b.test\r\n\r\n",
	} {
		line := strings.SplitN(req, "\r\n", 2)[0]
		t.Run(line, func(t *testing.T) {
			resp, err := httpAsk(t, srv.Addr("http"), req)
			if err != nil {
				t.Fatal(err)
			}
			body := bodyOf(resp)
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("X-Rotor-Error") != "bad_request" {
				t.Errorf("%s: %d X-Rotor-Error %q (%q), want 400 bad_request", line, resp.StatusCode, resp.Header.Get("X-Rotor-Error"), body)
			}
		})
	}
	noFailures(t, srv, "up")
}

// TestForwardFragmentNotSent: a fragment is the client's own (RFC 9110
// section 4.2.5): it is not sent on, neither raw nor escaped as %23.
func TestForwardFragmentNotSent(t *testing.T) {
	rt := newRawTarget(t, serveAnswers(false, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
	srv := directGateway(t)
	for _, tc := range []struct{ method, uri, want string }{
		{"GET", "/p#frag", "GET /p HTTP/1.1"},
		{"GET", "/p?q=1#frag", "GET /p?q=1 HTTP/1.1"},
		{"GET", "/a%23b#frag", "GET /a%23b HTTP/1.1"},
		{"POST", "/p?q=1#frag", "POST /p?q=1 HTTP/1.1"},
	} {
		resp, _, err := askForward(t, srv, tc.method, "http://"+rt.Addr()+tc.uri)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s %s: %d %v", tc.method, tc.uri, resp.StatusCode, err)
		}
		head := <-rt.heads
		if got := strings.SplitN(head, "\r\n", 2)[0]; got != tc.want {
			t.Errorf("%s %s: target got %q, want %q", tc.method, tc.uri, got, tc.want)
		}
	}
}

// TestForwardTrailerHeaderWithoutTrailers: a request's Trailer header
// announces trailer fields; rotor does not send the header on without
// the fields it announces.
func TestForwardTrailerHeaderWithoutTrailers(t *testing.T) {
	trailers := make(chan string, 1)
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		head, err := rt.readHead(br)
		if err != nil {
			return
		}
		if !strings.Contains(strings.ToLower(head), "transfer-encoding: chunked") {
			t.Errorf("the streamed body is not chunked:\n%s", head)
			return
		}
		if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
			t.Errorf("reading the body: %v", err)
			return
		}
		var tr strings.Builder
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				t.Errorf("reading the trailer section: %v", err)
				return
			}
			if line == "\r\n" {
				break
			}
			tr.WriteString(line)
		}
		trailers <- tr.String()
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	srv := directGateway(t)
	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "POST http://%s/ HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n3\r\nabc\r\n0\r\nX-T: v\r\n\r\n", rt.Addr(), rt.Addr())
	if resp, body := h1Read(t, br, "POST"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("answer: %d %q", resp.StatusCode, body)
	}
	head := <-rt.heads
	tr := <-trailers
	announced := strings.Contains(strings.ToLower(head), "\r\ntrailer:")
	sent := strings.Contains(tr, "X-T: v")
	if announced != sent {
		t.Errorf("Trailer announced %v, trailer fields sent %v (%q); head:\n%s", announced, sent, tr, head)
	}
}
