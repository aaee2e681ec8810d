package gateway

// Fuzz targets for rotor's hostile-input surfaces (issue 7): the SOCKS5
// front (greeting, RFC 1929 auth, request), the HTTP front (request line
// and headers), config decoding, and the pure SOCKS5 byte helpers.
//
// Seed corpora live in testdata/fuzz/<FuzzName>/, one annotated file per
// seed (the file name says what the bytes are). `go test` runs every seed
// as a unit test; .ci/fuzz.sh runs each target for a few seconds. A crash
// found by the fuzzer becomes a named regression seed there, with the
// issue link in the file name or a comment in this file.
//
// The front targets drive a real running gateway over loopback. Its only
// upstream is disabled, so no input ever makes rotor dial anything: a
// complete request is answered "unavailable" after wait_for_upstream
// (1ms). Each input costs one loopback connection and well under 10ms.

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/rs/zerolog"
)

// fuzzHandshake is listen.handshake_timeout for the front targets.
const fuzzHandshake = 200 * time.Millisecond

// fuzzGatewayConf is the gateway the front targets attack. The upstream is
// disabled: it is never probed and never eligible, so nothing is dialled.
const fuzzGatewayConf = `
[listen]
socks5 = "127.0.0.1:0"
http   = "127.0.0.1:0"
admin  = ""
handshake_timeout = "200ms"

[pool]
max_attempts      = 1
wait_for_upstream = "1ms"

[[upstream]]
url      = "socks5://127.0.0.1:9"
name     = "never"
disabled = true
`

// fuzzClientConf adds client credentials, so the auth paths run.
const fuzzClientConf = `
[[client]]
username = "fuzz"
password = "fuzz-pw"
`

// panicWatch is a log sink that keeps nothing but notices the lines a
// recovered panic leaves (rotor's recoverConn and net/http's own
// recovery), so a fuzz target can fail on a panic rotor contained.
type panicWatch struct {
	n    atomic.Int64
	last atomic.Pointer[string]
}

func (w *panicWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("panicked")) || bytes.Contains(p, []byte("panic serving")) {
		w.n.Add(1)
		s := string(p)
		w.last.Store(&s)
	}
	return len(p), nil
}

// startFuzzGateway is startGateway for any testing.TB (fuzz targets get a
// *testing.F), logging only into w.
func startFuzzGateway(tb testing.TB, text string, w io.Writer) *Server {
	tb.Helper()
	cfg, err := ParseConfig("fuzz.toml", []byte(text))
	if err != nil {
		tb.Fatalf("config: %v", err)
	}
	srv, err := New(cfg, Options{Log: zerolog.New(w)})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	if err := srv.Start(); err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

// frontFuzzer holds two gateways, one open and one requiring credentials.
type frontFuzzer struct {
	open, auth *Server
	watch      *panicWatch
}

func newFrontFuzzer(f *testing.F) *frontFuzzer {
	ff := &frontFuzzer{watch: &panicWatch{}}
	ff.open = startFuzzGateway(f, fuzzGatewayConf, ff.watch)
	ff.auth = startFuzzGateway(f, fuzzGatewayConf+fuzzClientConf, ff.watch)
	return ff
}

// feed sends data as one client connection to front, half-closes, and
// reads the answer until the server closes. It fails when the server
// takes longer than 5× the handshake deadline to close after the client
// went quiet, when a panic was recovered, or when goroutines stay behind.
// It returns what the server sent.
func (ff *frontFuzzer) feed(t *testing.T, srv *Server, front string, data []byte) []byte {
	t.Helper()
	before := runtime.NumGoroutine()
	panics := ff.watch.n.Load()
	c, err := net.DialTimeout("tcp", srv.Addr(front), 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s front: %v", front, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	// The server may refuse and close before it has read everything: a
	// failed write is an answer, not a test failure.
	_, _ = c.Write(data)
	quiet := time.Now()
	_ = c.(*net.TCPConn).CloseWrite()
	var got bytes.Buffer
	_, err = io.Copy(&got, io.LimitReader(c, 1<<20))
	took := time.Since(quiet)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s front kept a quiet client open for %v (handshake deadline %v)", front, took, fuzzHandshake)
	}
	if took > 5*fuzzHandshake {
		t.Errorf("%s front closed a quiet client after %v, want < %v", front, took, 5*fuzzHandshake)
	}
	if n := ff.watch.n.Load(); n != panics {
		t.Fatalf("%s front recovered a panic on input %q:\n%s", front, data, *ff.watch.last.Load())
	}
	settleGoroutines(t, before, 2*time.Second)
	return got.Bytes()
}

// settleGoroutines waits up to max for the goroutine count to come back to
// want (handlers end just after they close the conn).
func settleGoroutines(t testing.TB, want int, max time.Duration) {
	t.Helper()
	deadline := time.Now().Add(max)
	for {
		n := runtime.NumGoroutine()
		if n <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("goroutines: %d before, %d after %v\n%s", want, n, max, buf)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// FuzzSOCKSFront sends arbitrary bytes as a SOCKS5 client: greeting,
// optional RFC 1929 sub-negotiation, request, pipelined data. With auth
// true the gateway requires credentials fuzz/fuzz-pw.
func FuzzSOCKSFront(f *testing.F) {
	f.Add(false, []byte("\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50"))
	ff := newFrontFuzzer(f)
	f.Fuzz(func(t *testing.T, auth bool, data []byte) {
		srv := ff.open
		if auth {
			srv = ff.auth
		}
		got := ff.feed(t, srv, "socks5", data)
		// Every answer starts with a method selection (RFC 1928 section
		// 3): rotor never answers a SOCKS5 client with anything else. A
		// SOCKS4 request gets the SOCKS4 rejection, an HTTP request a 400.
		switch {
		case len(got) == 0:
		case len(data) >= 2 && data[0] == 4:
			if !bytes.Equal(got, []byte{0, 0x5B, 0, 0, 0, 0, 0, 0}) {
				t.Errorf("SOCKS4 request answered %q, want the SOCKS4 rejection", got)
			}
		case len(data) >= 2 && isUpperASCII(data[0]) && isUpperASCII(data[1]):
			if !bytes.HasPrefix(got, []byte("HTTP/1.1 400 ")) {
				t.Errorf("HTTP request answered %q, want a 400", got)
			}
		case got[0] != 5:
			t.Errorf("first byte of the answer is %#x, want 0x05 (answer %q)", got[0], got)
		}
		// Success is impossible: the only upstream is disabled.
		if rep, ok := socksReplyCode(got); ok && rep == repSuccess {
			t.Errorf("a request succeeded with no eligible upstream: answer %q", got)
		}
	})
}

// socksReplyCode finds the REP byte of the request reply in a server's
// answer: method selection, RFC 1929 status when method 02 was chosen,
// then the reply.
func socksReplyCode(got []byte) (byte, bool) {
	i := 2
	switch {
	case len(got) < 2 || got[1] == 0xFF:
		return 0, false
	case got[1] == 2:
		if len(got) < 4 || got[3] != 0 {
			return 0, false
		}
		i = 4
	}
	if len(got) < i+2 || got[i] != 5 {
		return 0, false
	}
	return got[i+1], true
}

// FuzzHTTPFront sends arbitrary bytes as an HTTP front client: request
// line, headers, maybe a body and a second request.
func FuzzHTTPFront(f *testing.F) {
	f.Add(false, []byte("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"))
	ff := newFrontFuzzer(f)
	f.Fuzz(func(t *testing.T, auth bool, data []byte) {
		srv := ff.open
		if auth {
			srv = ff.auth
		}
		got := ff.feed(t, srv, "http", data)
		// A SOCKS5 client (first byte 5, after up to 4 empty lines, as
		// serve skips them) is answered in SOCKS5, a SOCKS4 one (4) in
		// SOCKS4, a TLS client (0x16)
		// closed without an answer; every other answer is HTTP.
		lead := data
		for i := 0; i < 4 && len(lead) > 0 && (lead[0] == '\r' || lead[0] == '\n'); i++ {
			lead = lead[1:]
		}
		switch {
		case len(lead) > 0 && lead[0] == socks5Version:
			if len(got) > 0 && !bytes.Equal(got, []byte{5, 0xFF}) {
				t.Errorf("SOCKS5 greeting answered %q, want 05 FF", got)
			}
		case len(lead) > 0 && lead[0] == socks4Version:
			if len(got) > 0 && !bytes.Equal(got, []byte{0, 91, 0, 0, 0, 0, 0, 0}) {
				t.Errorf("SOCKS4 request answered %q, want a SOCKS4 reject", got)
			}
		case len(lead) > 0 && lead[0] == tlsHandshakeRecord:
			if len(got) > 0 {
				t.Errorf("TLS record answered %q, want a close", got)
			}
		case len(got) > 0 && !bytes.HasPrefix(got, []byte("HTTP/1.")):
			t.Errorf("answer is not HTTP: %q", got)
		}
		// Only a CONNECT success answers 200 on the proxy port, and no
		// upstream is eligible.
		if bytes.HasPrefix(got, []byte("HTTP/1.1 200")) {
			t.Errorf("a request succeeded with no eligible upstream: %q", got)
		}
	})
}

// FuzzConfig decodes and validates arbitrary TOML: ParseConfig never
// panics, and every error is a ConfigErrors whose entries name the file,
// carry a line within the file, and for a syntax error the decoder's own
// line, alone (STYLE rule 57).
func FuzzConfig(f *testing.F) {
	f.Add([]byte("[[upstream]]\nurl = \"direct://\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig("f.toml", data)
		if err == nil {
			if cfg == nil {
				t.Fatal("nil config and nil error")
			}
			return
		}
		if cfg != nil {
			t.Errorf("config returned along with error %v", err)
		}
		var ces ConfigErrors
		if !errors.As(err, &ces) || len(ces) == 0 {
			t.Fatalf("error %T %q is not a non-empty ConfigErrors", err, err)
		}
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, e := range ces {
			if e.File != "f.toml" {
				t.Errorf("error %q names file %q, want f.toml", e.Msg, e.File)
			}
			if e.Line < 0 || e.Line > lines {
				t.Errorf("error %q at line %d; the file has %d lines", e.Msg, e.Line, lines)
			}
			if strings.TrimSpace(e.Msg) == "" {
				t.Errorf("empty message at line %d", e.Line)
			}
		}
		// A syntax error stops everything, at the line of the byte the
		// decoder points at (its own line is one too far when that byte
		// is a newline); a value the typed decode refuses does not (it
		// is one error among all). Nesting past maxNesting is refused
		// before the decoder runs, alone too, and may come first.
		var pe toml.ParseError
		var tree map[string]any
		if len(ces) == 1 && ces[0].Msg == nestingMsg {
			return
		}
		if _, derr := toml.Decode(string(data), &tree); errors.As(derr, &pe) && pe.Position.Line > 0 {
			want := pe.Position.Line
			if st := pe.Position.Start; st > 0 && st <= len(data) {
				want = 1 + bytes.Count(data[:st], []byte("\n"))
			}
			if len(ces) != 1 || ces[0].Line != want {
				t.Errorf("decoder points at line %d (%s), ParseConfig says %v", want, pe.Message, err)
			}
		}
	})
}

// FuzzPreferMethod checks the greeting rewrite: it never panics or reads
// out of bounds, only reorders the method list (a permutation of it,
// nothing else in b changes), and puts m first when a well-formed
// greeting offers it.
func FuzzPreferMethod(f *testing.F) {
	f.Add([]byte{5, 2, 0, 2}, byte(2))
	f.Fuzz(func(t *testing.T, b []byte, m byte) {
		orig := append([]byte(nil), b...)
		got := append([]byte(nil), b...)
		preferMethod(got, m)
		if len(got) != len(orig) {
			t.Fatalf("length changed: %d → %d", len(orig), len(got))
		}
		if len(orig) < 2 || orig[0] != 5 || len(orig) < 2+int(orig[1]) {
			if !bytes.Equal(got, orig) {
				t.Fatalf("not a greeting %x, changed to %x", orig, got)
			}
			return
		}
		end := 2 + int(orig[1])
		if !bytes.Equal(got[:2], orig[:2]) || !bytes.Equal(got[end:], orig[end:]) {
			t.Fatalf("bytes outside the method list changed: %x → %x", orig, got)
		}
		var want, have [256]int
		for i := 2; i < end; i++ {
			want[orig[i]]++
			have[got[i]]++
		}
		if want != have {
			t.Fatalf("method list %x is not a permutation of %x", got[2:end], orig[2:end])
		}
		if want[m] > 0 && got[2] != m {
			t.Fatalf("method %#x offered but not first: %x", m, got[2:end])
		}
		if want[m] == 0 && !bytes.Equal(got, orig) {
			t.Fatalf("method %#x not offered, list changed: %x → %x", m, orig, got)
		}
	})
}

// FuzzSOCKSHandshakeLen checks the handshake length parser: it never
// panics or reads out of bounds, returns -1 or a length within b, and a
// length found is stable when more bytes follow (pipelined data).
func FuzzSOCKSHandshakeLen(f *testing.F) {
	f.Add([]byte("\x05\x01\x00\x05\x01\x00\x01\x7f\x00\x00\x01\x00\x50"), false, []byte("GET /"))
	f.Fuzz(func(t *testing.T, b []byte, userPass bool, more []byte) {
		n := socksHandshakeLen(b, userPass)
		if n != -1 && (n <= 0 || n > len(b)) {
			t.Fatalf("socksHandshakeLen(%x, %v) = %d, want -1 or 1..%d", b, userPass, n, len(b))
		}
		if n < 0 {
			return
		}
		ext := append(append([]byte(nil), b...), more...)
		if m := socksHandshakeLen(ext, userPass); m != n {
			t.Fatalf("length %d became %d after appending %x", n, m, more)
		}
	})
}
