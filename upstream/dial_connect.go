package upstream

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/net/proxy"

	"github.com/rotor-proxy/rotor/health"
)

// maxConnectResponseBytes bounds how much of a CONNECT response rotor reads
// before giving up on it (status line plus headers), like net/http's
// transport bounds its own CONNECT (STYLE rule 28).
const maxConnectResponseBytes = 16 << 10

// ConnectStatusError is a non-2xx answer to CONNECT (RFC 9110 §9.3.6), or
// with Plain an http:// proxy's own error answer to a forwarded plain-HTTP
// request. Its text fields are the proxy's, which may echo rotor's
// request (Proxy-Authorization included): Error shows them through
// PeerText, whoever filled them in. The class and stage it maps to are in
// the table in classify.go.
type ConnectStatusError struct {
	StatusCode int    // e.g. 407
	Status     string // status line after the version, e.g. "407 Proxy Authentication Required"
	// SquidError is the X-Squid-Error header ("ERR_CONNECT_FAIL 111"),
	// squid's mark on errors it generated itself; empty when absent. A
	// value that is squid's own word (squidWord) is kept as sent, any
	// other is scrubbed (squidText).
	SquidError string
	// Plain marks the answer to a forwarded plain-HTTP request (absolute
	// form, e.g. GET http://host/), not to CONNECT; see PlainAnswer.
	Plain bool
	// reason is the reason phrase as the proxy sent it, for
	// classification only (tinyproxy's "Unable to connect"): Status is
	// scrubbed against every secret rotor holds, and a 1-byte password
	// "a" made "Unxxxxxble to connect" of it. It is never shown.
	// Empty: the reason phrase of Status.
	reason string
}

// squidWordRE matches an X-Squid-Error value squid writes itself: an
// error name and an optional errno ("ERR_CONNECT_FAIL 111"). Such a
// value carries nothing of rotor's request, so no secret.
var squidWordRE = regexp.MustCompile(`^ERR_[A-Z_]+( [0-9]+)?$`)

// squidText is the SquidError field for the header value v: v itself
// when it is squid's own word, else v through peerText. Scrubbing squid's
// word against a 1-byte secret ("1") made "ERR_CONNECT_FAIL xxxxx…" of
// "ERR_CONNECT_FAIL 111", which classify then read wrong.
func squidText(v string, peerText func(string) string) string {
	if squidWordRE.MatchString(v) {
		return v
	}
	return peerText(v)
}

// rawReason is the reason phrase classification reads (see reason).
func (e *ConnectStatusError) rawReason() string {
	if e.reason != "" {
		return e.reason
	}
	return reasonPhrase(e.Status)
}

func (e *ConnectStatusError) Error() string {
	what := "CONNECT"
	if e.Plain {
		what = "the forwarded request"
	}
	if e.SquidError != "" {
		return "proxy answered " + what + " with " + strconv.Quote(PeerText(e.Status)) + " (" + PeerText(e.SquidError) + ")"
	}
	return "proxy answered " + what + " with " + strconv.Quote(PeerText(e.Status)) + e.webServerHint()
}

// connectDialer tunnels through an HTTP proxy with CONNECT, over TLS to the
// proxy when tls is set (https:// upstreams).
type connectDialer struct {
	proxyDialer
	tls *tls.Config // nil for http://
}

var _ proxy.ContextDialer = (*connectDialer)(nil)
var _ proxy.Dialer = (*connectDialer)(nil)

// Dial is DialContext with context.Background, for the proxy.Dialer shape.
func (d *connectDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// DialContext opens a tunnel to addr with CONNECT. ctx governs only the
// establishment. The conn returned is the raw *net.TCPConn (http) or the
// *tls.Conn (https) unless the proxy sent tunnel bytes along with its
// response; those are then served first by a thin wrapper.
//
// A host that cannot go into a request line (see checkTargetHost: CR, LF,
// SP, NUL, …) is refused before the proxy is dialed, with an error
// wrapping ErrInvalidTarget, and the request is written from the checked
// host and port, never from addr as given. The wait for the proxy's
// answer is the wait for the target (rule (2) in classify.go): after TLS
// to an https proxy it gets a budget of its own and a deadline there is
// target_timeout; an http:// proxy has proved nothing before it answers,
// so a deadline is a proxy_handshake timeout that the attempt loop
// re-classifies when the upstream served lately.
func (d *connectDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := splitTarget(network, addr)
	if err != nil {
		return nil, err
	}
	if err := checkTargetHost(host); err != nil {
		return nil, &health.Failure{Class: health.TargetUnreachable, Stage: health.StageTargetConnect, Target: host, Err: err}
	}
	target := net.JoinHostPort(host, strconv.Itoa(int(port)))
	raw, err := d.dialProxy(ctx, host)
	if err != nil {
		return nil, err
	}
	var out net.Conn
	err = handshake(ctx, raw, d.cfg.HandshakeTimeout, func() error {
		c := raw
		alive := false
		if d.tls != nil {
			tc := tls.Client(raw, d.tls)
			if err := tc.HandshakeContext(ctx); err != nil {
				return fmt.Errorf("tls handshake with proxy: %w", scrubError(err, d.ScrubPeer))
			}
			c, alive = tc, true
			if err := replyPhase(ctx, raw, d.cfg.HandshakeTimeout); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(c, d.request(target)); err != nil {
			return err
		}
		over, err := readConnectAnswer(c, d.peerText)
		if err != nil {
			return awaitingTarget(err, alive)
		}
		out = c
		if len(over) > 0 {
			out = &bufferedConn{Conn: c, buf: over}
		}
		return nil
	})
	if err != nil {
		raw.Close()
		return nil, failAt(err, health.StageProxyHandshake, host)
	}
	return out, nil
}

// request renders the CONNECT request for target, a host:port built from
// a host checkTargetHost accepted. Proxy-Authorization carries the
// userinfo; it is written only to the proxy and never into an error.
func (d *connectDialer) request(target string) string {
	var b strings.Builder
	b.WriteString("CONNECT ")
	b.WriteString(target)
	b.WriteString(" HTTP/1.1\r\nHost: ")
	b.WriteString(target)
	b.WriteString("\r\n")
	if d.hasAuth {
		b.WriteString("Proxy-Authorization: Basic ")
		b.WriteString(d.basicToken())
		b.WriteString("\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// secrets are the strings no error may contain: the password and the
// Proxy-Authorization token.
func (d *connectDialer) secrets() []string {
	if !d.hasAuth {
		return nil
	}
	return []string{d.pass, d.basicToken()}
}

func (d *connectDialer) basicToken() string {
	return base64.StdEncoding.EncodeToString([]byte(d.user + ":" + d.pass))
}

// connectReq is the request ReadResponse pairs the answer with; only its
// method matters (a 2xx answer to CONNECT has no body).
var connectReq = &http.Request{Method: http.MethodConnect}

// readConnectResponse reads the proxy's answer to CONNECT from r, at most
// maxConnectResponseBytes of it. On 2xx it returns the bytes read past the
// header (tunnel data the proxy sent early; usually none). Otherwise it
// returns *ConnectStatusError, or ErrMalformedReply for anything that is not
// an HTTP response. Peer text that goes into errors goes through PeerText
// with secrets (the proxy password and Basic token), in case a broken
// proxy echoes the request.
//
// A read that ends at a deadline (or a cancellation) in the middle of a
// line is reported as that error, not as the parser's view of the
// fragment: bufio's ReadLine hands back a partial line with no error, and
// http.ReadResponse would call "HTTP/1" malformed. An answer trickling in
// past the deadline is a timeout, as a silent proxy's is.
func readConnectResponse(r io.Reader, secrets ...string) (over []byte, err error) {
	return readConnectAnswer(r, func(s string) string { return PeerText(s, secrets...) })
}

// readConnectAnswer is readConnectResponse with peerText for the peer
// text that goes into errors: the dialer's (proxyDialer.peerText) hides
// every secret rotor holds, whatever its length, before the cut.
func readConnectAnswer(r io.Reader, peerText func(string) string) (over []byte, err error) {
	mr := &readMemo{r: r}
	lr := &io.LimitedReader{R: mr, N: maxConnectResponseBytes}
	br := bufio.NewReaderSize(lr, 4096)
	// An answer that does not begin as HTTP does (a SOCKS5 server's 05 FF)
	// is malformed at once: waiting for a line's end it never sends would
	// pass for a proxy still reaching the target.
	if _, err := br.Peek(1); err == nil {
		if p, _ := br.Peek(min(br.Buffered(), len("HTTP/"))); !strings.HasPrefix("HTTP/", string(p)) {
			return nil, fmt.Errorf("%w: CONNECT response is not HTTP: %s", ErrMalformedReply, peerText(strconv.Quote(string(p))))
		}
	}
	resp, err := http.ReadResponse(br, connectReq)
	if err != nil {
		if isTimeout(err) || IsCanceled(err) {
			return nil, fmt.Errorf("reading CONNECT response: %w", err)
		}
		if cut := mr.cut(); cut != nil {
			return nil, fmt.Errorf("reading CONNECT response: %w", cut)
		}
		if lr.N == 0 {
			return nil, fmt.Errorf("%w: CONNECT response header over %d bytes", ErrMalformedReply, maxConnectResponseBytes)
		}
		return nil, fmt.Errorf("%w: CONNECT response: %s", ErrMalformedReply, peerText(err.Error()))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, &ConnectStatusError{
			StatusCode: resp.StatusCode,
			Status:     peerText(resp.Status),
			SquidError: squidText(resp.Header.Get("X-Squid-Error"), peerText),
			reason:     reasonPhrase(resp.Status),
		}
	}
	if n := br.Buffered(); n > 0 {
		p, _ := br.Peek(n) // cannot fail: n bytes are buffered
		over = append([]byte(nil), p...)
	}
	return over, nil
}

// readMemo passes reads through and remembers the last error one returned,
// which a bufio.Reader above it may have swallowed (ReadLine returns a
// partial line without its error).
type readMemo struct {
	r   io.Reader
	err error
}

func (m *readMemo) Read(p []byte) (int, error) {
	n, err := m.r.Read(p)
	if err != nil {
		m.err = err
	}
	return n, err
}

// cut returns the last read's error when it was a deadline or a
// cancellation, else nil.
func (m *readMemo) cut() error {
	if m.err != nil && (isTimeout(m.err) || IsCanceled(m.err)) {
		return m.err
	}
	return nil
}

// bufferedConn serves bytes the proxy sent right after its CONNECT answer
// before reading from the conn (STYLE rule 32). It is used only when such
// bytes exist, so the common case keeps the raw conn for splice.
type bufferedConn struct {
	net.Conn
	buf []byte
}

func (c *bufferedConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// WriteTo drains the buffer, then hands over to the underlying conn's
// WriteTo (splice for *net.TCPConn) when it has one.
func (c *bufferedConn) WriteTo(w io.Writer) (int64, error) {
	var total int64
	if len(c.buf) > 0 {
		n, err := w.Write(c.buf)
		total += int64(n)
		c.buf = c.buf[n:]
		if err != nil {
			return total, err
		}
	}
	n, err := io.Copy(w, c.Conn)
	return total + n, err
}

// ReadFrom lets io.Copy(conn, src) use the underlying conn's ReadFrom
// (splice/sendfile for *net.TCPConn).
func (c *bufferedConn) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(c.Conn, r)
}

// CloseWrite half-closes the underlying conn (TCP FIN or TLS close_notify).
func (c *bufferedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// NetConn returns the underlying conn, like tls.Conn.NetConn.
func (c *bufferedConn) NetConn() net.Conn { return c.Conn }

// DialForward opens a connection to the proxy for requests in absolute
// form (GET http://host/path), TCP to an http:// proxy and TLS over it to
// an https:// one (the certificate checked as for CONNECT, SNI = proxy
// host), and returns the value of the Proxy-Authorization header to send
// with them ("" without credentials). It is how rotor forwards plain-HTTP
// traffic and how the prober reaches http:// probe URLs through HTTP
// proxies: stock squid and tinyproxy refuse CONNECT to port 80 (squid's
// https_port as much as its http_port). ok is always true; ctx governs
// only the connect and the TLS handshake. Errors are classified as
// DialContext's: stage dial for the TCP connect, proxy_handshake for TLS.
func (d *connectDialer) DialForward(ctx context.Context) (c net.Conn, proxyAuth string, ok bool, err error) {
	raw, err := d.dialProxy(ctx, d.host)
	if err != nil {
		return nil, "", true, err
	}
	c = raw
	if d.tls != nil {
		tc := tls.Client(raw, d.tls)
		err = handshake(ctx, raw, d.cfg.HandshakeTimeout, func() error {
			if err := tc.HandshakeContext(ctx); err != nil {
				return fmt.Errorf("tls handshake with proxy: %w", scrubError(err, d.ScrubPeer))
			}
			return nil
		})
		if err != nil {
			raw.Close()
			return nil, "", true, failAt(err, health.StageProxyHandshake, d.host)
		}
		c = tc
	}
	if d.hasAuth {
		proxyAuth = "Basic " + d.basicToken()
	}
	return c, proxyAuth, true, nil
}
