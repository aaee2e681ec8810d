package upstream

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/ (annotated by file name;
// see testdata/fuzz/README.md). Any crash found becomes a named regression
// seed there, with the issue link in the README.

// scriptConn is a net.Conn whose reads come from a fixed script and whose
// writes are discarded: the proxy side of a handshake, from fuzz input.
type scriptConn struct {
	r io.Reader
	net.Conn
}

func (c *scriptConn) Read(p []byte) (int, error)          { return c.r.Read(p) }
func (c *scriptConn) Write(p []byte) (int, error)         { return len(p), nil }
func (c *scriptConn) SetDeadline(time.Time) error         { return nil }
func (c *scriptConn) SetReadDeadline(time.Time) error     { return nil }
func (c *scriptConn) SetWriteDeadline(time.Time) error    { return nil }
func (c *scriptConn) Close() error                        { return nil }
func (c *scriptConn) LocalAddr() net.Addr                 { return &net.TCPAddr{} }
func (c *scriptConn) RemoteAddr() net.Addr                { return &net.TCPAddr{} }
func (c *scriptConn) String() string                      { return "script" }
func (c *scriptConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(io.Discard, r) }

// FuzzSOCKS5Reply drives the whole client handshake (method selection,
// RFC 1929 status, CONNECT reply) with proxy bytes from the fuzzer. It must
// never panic, must return (reads are exact and bounded), must never read
// past the CONNECT reply on success, and every error must classify to a
// contract class.
func FuzzSOCKS5Reply(f *testing.F) {
	f.Add([]byte{5, 0, 5, 0, 0, 1, 127, 0, 0, 1, 0, 80}, false)          // no auth, success
	f.Add([]byte{5, 2, 1, 0, 5, 0, 0, 1, 0, 0, 0, 0, 0, 0}, true)        // microsocks: auth ok, BND 0.0.0.0:0
	f.Add([]byte{5, 2, 1, 1}, true)                                      // dante wrong password
	f.Add([]byte{5, 0xFF}, true)                                         // no acceptable method
	f.Add([]byte{5, 0, 5, 5, 0, 1}, false)                               // REP 5: target refused
	f.Add([]byte{5, 0, 5, 0, 0, 3, 4, 'h', 'o', 's', 't', 0, 80}, false) // domain BND
	f.Add([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"), false)             // an HTTP proxy
	f.Fuzz(func(t *testing.T, script []byte, auth bool) {
		d := &socks5Dialer{proxyDialer: proxyDialer{user: "u", pass: "p", hasAuth: auth}}
		req, _ := socks5ConnectRequest("example.com", 443)
		r := bytes.NewReader(script)
		err := d.negotiate(context.Background(), &scriptConn{r: r}, req)
		if err == nil {
			return
		}
		f := Classify(err, health.StageProxyHandshake)
		if f == nil || f.Class == health.ClassNone || f.Class.String() == "" ||
			strings.HasPrefix(f.Class.String(), "class(") {
			t.Fatalf("error %v classified as %v", err, f)
		}
	})
}

// FuzzConnectResponse feeds arbitrary proxy answers to the CONNECT
// response reader. It must never panic, must stop within the header
// bound, must return over-read bytes that are a suffix of the input, and
// must keep the secret out of every error.
func FuzzConnectResponse(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))                                  // squid
	f.Add([]byte("HTTP/1.0 200 Connection established\r\nProxy-agent: tinyproxy/1.11.1\r\n\r\n")) // tinyproxy
	f.Add([]byte("HTTP/1.1 200 OK\r\n\r\nSSH-2.0-OpenSSH\r\n"))                                   // over-read
	f.Add([]byte("HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 503 Service Unavailable\r\nX-Squid-Error: ERR_CONNECT_FAIL 111\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 999 s3cretPW\r\n\r\n")) // a proxy echoing the password
	f.Add([]byte("\x05\x00"))
	const secret = "s3cretPW"
	f.Fuzz(func(t *testing.T, in []byte) {
		lr := &countingReader{r: bytes.NewReader(in)}
		over, err := readConnectResponse(lr, secret)
		if lr.n > maxConnectResponseBytes {
			t.Fatalf("read %d bytes, bound is %d", lr.n, maxConnectResponseBytes)
		}
		if err != nil {
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("error leaks the secret: %v", err)
			}
			if f := Classify(err, health.StageProxyHandshake); f == nil || f.Class == health.ClassNone {
				t.Fatalf("unclassified: %v", err)
			}
			return
		}
		if !bytes.HasSuffix(in[:lr.n], over) {
			t.Fatalf("over-read %q is not what followed the header", over)
		}
	})
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// FuzzParseList: the list parser never panics, keeps line numbers in
// range, and every entry is a usable upstream URL.
func FuzzParseList(f *testing.F) {
	f.Add("socks5://u:p@10.0.0.1:1080\n10.0.0.2:8080\n# c\n10.0.0.3:8080:u:p\nu:p@[::1]:1080\n", "http")
	f.Add("\ufeffbad line\r\n:::\n[\n", "socks5")
	f.Fuzz(func(t *testing.T, in, scheme string) {
		entries, errs := ParseList(strings.NewReader(in), scheme)
		lines := strings.Count(in, "\n") + 1
		for _, e := range entries {
			if e.Line < 1 || e.Line > lines {
				t.Fatalf("line %d out of range", e.Line)
			}
			if !listSchemes[e.URL.Scheme] || e.URL.Port() == "" || e.URL.Hostname() == "" {
				t.Fatalf("unusable entry %s", e.URL.Redacted())
			}
			if _, err := NewDialer(e.URL, DialConfig{}); err != nil && !strings.Contains(err.Error(), "255 bytes") {
				t.Fatalf("entry %s rejected by NewDialer: %v", e.URL.Redacted(), err)
			}
		}
		for _, e := range errs {
			if e.Line < 0 || e.Line > lines || e.Err == nil {
				t.Fatalf("bad LineError %+v", e)
			}
		}
	})
}

// FuzzClassify: typed protocol errors always map to a contract class.
func FuzzClassify(f *testing.F) {
	f.Add(byte(5), 503, "ERR_CONNECT_FAIL 111", "503 Service Unavailable")
	f.Add(byte(1), 500, "", "500 Unable to connect")
	f.Add(byte(8), 400, "ERR_INVALID_URL 0", "400 Bad Request") // the client's URL: none, ErrRequestRejected
	f.Fuzz(func(t *testing.T, rep byte, status int, squid, text string) {
		ce := &ConnectStatusError{StatusCode: status, Status: text, SquidError: squid}
		for _, f := range []*health.Failure{
			Classify(&ReplyError{Code: rep}, health.StageProxyHandshake),
			Classify(ce, health.StageProxyHandshake),
			PlainAnswer(ce),
		} {
			// ClassNone only for an answer that blames the client's
			// request, which is reported to no record.
			if f == nil || f.Class == health.ClassNone && !ClientFault(f) || strings.HasPrefix(f.Class.String(), "class(") ||
				f.Stage == health.StageNone {
				t.Fatalf("%v classified as %+v", ce, f)
			}
		}
	})
}
