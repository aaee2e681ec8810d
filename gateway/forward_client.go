package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// fwdClient is the plain-HTTP forward path's client for one endpoint
// (issue #8). It keeps kept-alive upstream connections per target (one
// pool for an http:// upstream, which gets every request in absolute form)
// and runs each exchange in the handler's goroutine: write the request,
// read the answer's head, hand over the body. net/http's Transport runs a
// read and a write goroutine per connection and passes every request
// through both; under 32 keep-alive clients those hand-offs cost more CPU
// than the rest of the request. It takes only requests it can replay on
// a fresh connection when a kept-alive one turns out closed (idempotent
// method, no body or a buffered one); the others still go through the
// endpoint's http.Transport.
type fwdClient struct {
	e         *upstream.Endpoint
	proxy     bool   // http:// or https:// upstream: absolute form on a DialForward connection
	proxyAuth string // Proxy-Authorization rotor sends to such an upstream; "" without userinfo
	// room, when set (an upstream with max_conns), runs before a new
	// connection is dialled: it closes idle ones so that the open
	// connections stay within the limit (Server.connRoom).
	room func()
	// reusable, when set (direct://), is asked before an idle connection
	// is reused: false closes it (the destination policy changed).
	reusable func(net.Conn) bool

	mu     sync.Mutex            // guards the fields below
	idle   map[string][]*fwdConn // by target address ("" for an http:// upstream), newest last
	nidle  int
	sweep  *time.Timer // runs sweepIdle every fwdSweepEvery; nil when none is idle
	closed bool
}

const (
	// fwdIdleTimeout is how long an unused upstream connection is kept,
	// as the Transport's IdleConnTimeout was.
	fwdIdleTimeout = 90 * time.Second
	// fwdMaxIdlePerTarget bounds the idle connections to one target, as
	// the Transport's MaxIdleConnsPerHost (32) did: each holds a socket
	// (and an upstream's connection slot) for up to fwdIdleTimeout.
	fwdMaxIdlePerTarget = 32
	// fwdPeekAfter is how long a connection must have been idle for its
	// reuse to peek for unsolicited bytes first (fwdClient.get).
	fwdPeekAfter = 2 * time.Millisecond
	// fwdMaxIdle bounds one endpoint's idle connections over all targets.
	fwdMaxIdle = 1024
	// fwdSweepEvery is how often, while connections are idle, the sweep
	// looks for those the far end closed (or sent unasked bytes on) and
	// for those idle for fwdIdleTimeout. net/http's Transport sees a
	// close at once with a reader goroutine per connection; a peek per
	// idle connection every few seconds costs no goroutine, and a
	// connection in CLOSE-WAIT holds its fd and max_conns slot for at
	// most this long.
	fwdSweepEvery = 2 * time.Second
)

// fwdConn is one pooled upstream connection.
type fwdConn struct {
	c      net.Conn
	lr     headLimit // under cut: bounds an answer's head to fwdMaxResponseHead
	cut    cutMemo   // between lr and br: keeps the deadline error bufio drops
	br     *bufio.Reader
	bw     *bufio.Writer
	key    string
	idleAt time.Time
	fields connFields // the Connection fields of the answer's head (fieldsConn under lr)
}

func newFwdClient(e *upstream.Endpoint) *fwdClient {
	c := &fwdClient{e: e, idle: map[string][]*fwdConn{}}
	if e.AbsoluteForm() {
		c.proxy = true
		if u := e.URL.User; u != nil {
			pass, _ := u.Password()
			c.proxyAuth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.Username()+":"+pass))
		}
	}
	return c
}

// leanForwardable reports whether r can go through a fwdClient: the
// request is replayable and its Host needs no rewriting.
func leanForwardable(r *http.Request, bodyStreamed bool) bool {
	if bodyStreamed || !idempotent(r.Method) || r.URL.Opaque != "" {
		return false
	}
	return validHost(r.Host)
}

// validHost reports whether h is a non-empty Host of only the bytes RFC
// 3986 allows in host and port (section 3.2.2). Anything else (a
// non-ASCII name to punycode, a zone to remove) is left to net/http.
func validHost(h string) bool {
	if h == "" {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-._~!$&'()*+,;=:[]", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// fwdExchange is one request for fwdClient.roundTrip.
type fwdExchange struct {
	r         *http.Request // the client's request: method, URL, Host, header
	head      []byte        // r's head as it came (headScan.head); nil: not at hand
	addr      string        // target host:port
	body      []byte        // buffered request body; nil for none
	firstByte time.Duration // slow_body.first_byte; <= 0 none
	interim   interimWriter // gets the target's 1xx answers; nil: dropped
}

// roundTrip sends x and returns the answer, whose body must be read to
// the end (the connection is then reused) or closed (it is closed). ctx
// governs the whole exchange, body included. A kept-alive connection that
// fails before any byte of an answer was closed by the upstream while idle:
// the request goes again on another one, as net/http's Transport does.
func (fc *fwdClient) roundTrip(ctx context.Context, x *fwdExchange) (*http.Response, error) {
	// A kept-alive connection carries requests for one target, also to an
	// http:// upstream (as curl keeps them): tinyproxy reads only a
	// connection's first request and then relays raw bytes to its target,
	// so a request for another host on it would be answered by the first.
	key := x.addr
	for {
		pc, reused := fc.get(key)
		if pc == nil {
			if fc.room != nil {
				fc.room()
			}
			var err error
			if pc, err = fc.dial(ctx, key, x); err != nil {
				return nil, err
			}
		}
		resp, nothingRead, err := fc.exchange(ctx, pc, x)
		if err == nil {
			return resp, nil
		}
		_ = pc.c.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ne net.Error
		if reused && nothingRead && !(errors.As(err, &ne) && ne.Timeout()) {
			continue // not a first_byte timeout: that would wait again
		}
		if reused && errors.Is(err, errNotHTTPReused) {
			continue // a fresh connection tells whose it is (notHTTPConn)
		}
		return nil, err
	}
}

// dial opens a new connection for key: to the proxy itself for an
// http:// or https:// upstream, else a tunnel to the target through the endpoint's
// dialer (whose errors carry their class and stage).
func (fc *fwdClient) dial(ctx context.Context, key string, x *fwdExchange) (*fwdConn, error) {
	var c net.Conn
	var err error
	if fc.proxy {
		// Through the endpoint's dialer: the proxy's name cache, TLS to
		// an https:// proxy, errors with their class and stage.
		if c, _, _, err = fc.e.DialForward(ctx); err != nil {
			return nil, err
		}
	} else if c, err = fc.e.DialContext(ctx, "tcp", x.addr); err != nil {
		return nil, err
	}
	rc := c // what answers are read from
	if fc.proxy {
		// c itself stays as dialled: the idle sweep looks under it.
		rc = guardNotHTTP(c)
	}
	pc := &fwdConn{c: c, bw: bufio.NewWriterSize(c, 4096), key: key}
	pc.lr = headLimit{c: &fieldsConn{Conn: rc, f: &pc.fields}, remain: 1<<63 - 1}
	pc.cut.r = &pc.lr
	pc.br = bufio.NewReaderSize(&pc.cut, 4096)
	return pc, nil
}

// exchange writes x on pc and reads the answer's head. nothingRead is
// true when the connection failed before any byte of an answer.
func (fc *fwdClient) exchange(ctx context.Context, pc *fwdConn, x *fwdExchange) (resp *http.Response, nothingRead bool, err error) {
	// Cancelling ctx (the client went away) unblocks any read or write.
	stop := context.AfterFunc(ctx, func() { _ = pc.c.SetDeadline(aLongTimeAgo) })
	defer func() {
		if err != nil {
			stop()
		}
	}()
	fc.writeRequest(pc.bw, x)
	werr := pc.bw.Flush()
	if werr != nil && !peerEndedWrite(werr) {
		return nil, true, werr
	}
	if x.firstByte > 0 {
		_ = pc.c.SetReadDeadline(time.Now().Add(x.firstByte))
	}
	// The heads, interim answers included, may take fwdMaxResponseHead
	// bytes from the connection, as the Transport's MaxResponseHeaderBytes
	// bounds them: http.ReadResponse sets no limit of its own, and a target
	// sending endless header lines (or interim answers) would grow rotor's
	// memory with them. The limit counts what the buffer read ahead too, a
	// few KiB of body at most.
	pc.lr.remain = fwdMaxResponseHead
	pc.cut.reset()
	pc.fields.begin()
	defer pc.fields.end() // the body's bytes are not scanned
	if _, err := pc.br.Peek(1); err != nil {
		if werr != nil {
			return nil, true, werr // no early answer: the write's error tells what happened
		}
		return nil, true, err
	}
	if b, _ := pc.br.Peek(min(pc.br.Buffered(), len(httpPrefix))); fc.proxy && notHTTP(b) {
		// Only a kept-alive connection gets here (a fresh one's
		// notHTTPConn failed the Peek).
		return nil, false, errNotHTTPReused
	}
	for {
		resp, err = http.ReadResponse(pc.br, x.r)
		switch {
		case err != nil && pc.lr.remain <= 0:
			return nil, false, errRespHeadTooLarge
		case errors.As(err, new(*health.Failure)): // notHTTPConn's, after a first byte that was H
			return nil, false, err
		case err != nil && pc.cut.cut() != nil:
			// Cut short by the first_byte deadline: slow, not malformed.
			return nil, false, pc.cut.cut()
		case err != nil && parseError(err):
			return nil, false, invalidAnswer(fc.e.PeerError(err))
		case err != nil:
			return nil, false, err
		case resp.StatusCode == http.StatusSwitchingProtocols:
			// rotor sends no Upgrade: what follows is not HTTP any more.
			return nil, false, errSwitchingProtocols
		case resp.StatusCode < 200:
			// An interim answer (100, 102, 103): the final one follows.
			if x.interim != nil {
				x.interim.interim(resp.StatusCode, resp.Header)
			}
			continue
		}
		break
	}
	pc.lr.remain = 1<<63 - 1
	pc.fields.keep(resp)
	if x.firstByte > 0 {
		_ = pc.c.SetReadDeadline(time.Time{})
		if ctx.Err() != nil { // a cancel between the read and the reset stays a cancel
			_ = pc.c.SetDeadline(aLongTimeAgo)
		}
	}
	reuse := !resp.Close && werr == nil
	resp.Body = &fwdBody{fc: fc, pc: pc, body: resp.Body, stop: stop, reuse: reuse}
	return resp, false, nil
}

// peerEndedWrite reports whether err, a failed write of a request, is
// the peer's end of the connection (a reset, or a write after its close:
// ECONNRESET, EPIPE). The peer may have answered first, before the body
// was all sent (a 413, a 401, as tinyproxy relays a target that answers
// early and resets): exchange reads on, and relays that answer when it
// came (as answeredConn lets the Transport do), or returns the write's
// error when nothing did. A reset connection's read returns at once,
// with the bytes that came before the reset or with its end.
func peerEndedWrite(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// errNotHTTPReused is an answer that is not HTTP on a kept-alive
// connection to an http:// upstream: the request goes again on a fresh
// one (roundTrip), whose notHTTPConn says whose fault it is.
var errNotHTTPReused = errors.New("the upstream's answer on a kept-alive connection is not HTTP")

// aLongTimeAgo is a deadline in the past: it makes blocked I/O return.
var aLongTimeAgo = time.Unix(1, 0)

// writeRequest writes x's head and body to w, in origin form through a
// tunnel and in absolute form to an http:// upstream (RFC 9112 section
// 3.2), with the hop-by-hop headers and the client's proxy credentials
// left out (RFC 9110 section 7.6.1). The fields go in the client's order
// and with its spelling of their names (writeFields), as squid and
// tinyproxy forward them: to a target, header order and case are part of
// a client's fingerprint. Without the head's bytes (x.head) they go
// sorted, as net/http writes them.
func (fc *fwdClient) writeRequest(w *bufio.Writer, x *fwdExchange) {
	r := x.r
	w.WriteString(r.Method)
	w.WriteByte(' ')
	if fc.proxy {
		w.WriteString("http://")
		w.WriteString(r.Host)
	}
	w.WriteString(originTarget(r))
	w.WriteString(" HTTP/1.1\r\n")
	if !fc.writeFields(w, x) {
		fc.writeSorted(w, x)
	}
	if fc.proxyAuth != "" {
		w.WriteString("Proxy-Authorization: ")
		w.WriteString(fc.proxyAuth)
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(x.body)
}

// writeFields writes the field lines of the client's head (x.head) in
// its order and spelling, values trimmed as net/http reads them and an
// obs-fold joined with a space (RFC 9112 section 5.2), leaving out the
// hop-by-hop fields and those the client's Connection names. Host gets
// the target's authority where the client's Host was (first when it sent
// none, as HTTP/1.0 may), Content-Length the buffered body's length, the
// first non-empty User-Agent goes on and none other. It reports false,
// having written nothing, when x has no head.
func (fc *fwdClient) writeFields(w *bufio.Writer, x *fwdExchange) bool {
	head := x.head
	if len(head) == 0 {
		return false
	}
	r := x.r
	conn := r.Header["Connection"]
	if !hasFieldLine(head, "host") {
		writeHeaderLine(w, "Host", r.Host)
	}
	var host, ua, cl, open bool       // written; open: a field line without its CRLF yet
	skip := true                      // the current field is left out
	_, head, _ = bytesCut(head, '\n') // the request line
	for len(head) > 0 {
		var line []byte
		line, head, _ = bytesCut(head, '\n')
		line = trimCR(line)
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			if v := bytes.Trim(line, " \t"); !skip && len(v) > 0 {
				w.WriteByte(' ')
				w.Write(v)
			}
			continue
		}
		if open {
			w.WriteString("\r\n")
			open = false
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			break // the blank line
		}
		value = bytes.Trim(value, " \t")
		skip = true
		switch {
		case strings.EqualFold(string(name), "Host"):
			if !host {
				host = true
				w.Write(name)
				w.WriteString(": ")
				w.WriteString(r.Host)
				w.WriteString("\r\n")
			}
			continue
		case strings.EqualFold(string(name), "Content-Length"):
			if !cl && len(x.body) > 0 {
				cl = true
				w.Write(name)
				w.WriteString(": ")
				w.WriteString(strconv.Itoa(len(x.body)))
				w.WriteString("\r\n")
			}
			continue
		case strings.EqualFold(string(name), "User-Agent"):
			if ua || len(value) == 0 {
				continue
			}
			ua = true
		case hopField(string(name), conn):
			continue
		}
		skip = false
		w.Write(name)
		w.WriteString(": ")
		w.Write(value)
		open = true
	}
	if open {
		w.WriteString("\r\n")
	}
	if !cl && len(x.body) > 0 {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.Itoa(len(x.body)))
		w.WriteString("\r\n")
	}
	return true
}

// hasFieldLine reports whether head has a field named name (lower case).
func hasFieldLine(head []byte, name string) bool {
	_, head, _ = bytesCut(head, '\n')
	for len(head) > 0 {
		var line []byte
		line, head, _ = bytesCut(head, '\n')
		if n := len(name); len(line) > n && line[n] == ':' && strings.EqualFold(string(line[:n]), name) {
			return true
		}
	}
	return false
}

func bytesCut(b []byte, sep byte) (before, after []byte, found bool) {
	if i := bytes.IndexByte(b, sep); i >= 0 {
		return b[:i], b[i+1:], true
	}
	return b, nil, false
}

func trimCR(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\r' {
		return b[:n-1]
	}
	return b
}

// hopField reports whether the field named name (any case) is hop-by-hop
// or named by the client's Connection fields conn.
func hopField(name string, conn []string) bool {
	for _, h := range hopHeaders {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	for _, f := range conn {
		for n := range strings.SplitSeq(f, ",") {
			if strings.EqualFold(strings.TrimSpace(n), name) {
				return true
			}
		}
	}
	return false
}

// writeSorted writes r's fields from its header map, sorted (Host and
// User-Agent first), for a request whose head's bytes are not at hand.
func (fc *fwdClient) writeSorted(w *bufio.Writer, x *fwdExchange) {
	r := x.r
	writeHeaderLine(w, "Host", r.Host)
	// The client's User-Agent goes on as sent, and none when it sent none
	// (net/http would add Go-http-client/1.1, a fingerprint of rotor).
	if ua := r.Header["User-Agent"]; len(ua) > 0 && ua[0] != "" {
		writeHeaderLine(w, "User-Agent", ua[0])
	}
	conn := r.Header["Connection"]
	keys := make([]string, 0, 16)
	for k := range r.Header {
		if fwdSkipHeader(k, conn) {
			continue
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range r.Header[k] {
			writeHeaderLine(w, k, v)
		}
	}
	if len(x.body) > 0 {
		w.WriteString("Content-Length: ")
		w.WriteString(strconv.Itoa(len(x.body)))
		w.WriteString("\r\n")
	}
}

// originTarget is r's request target in origin form with its path and
// query bytes as the client sent them: the absolute form's scheme and
// authority and a fragment cut off, nothing re-escaped. net/http's
// URL.RequestURI escapes what Go's URL encoder would ("|", "{", "}", "^",
// "`", "\\" in a path): a proxy forwards the target it got (squid and
// tinyproxy do), and a signed URL or a scraper's fingerprint breaks when
// its bytes change. A target that is not in absolute form (no caller
// sends one) gives URL.RequestURI.
func originTarget(r *http.Request) string {
	t := r.RequestURI
	if i := strings.IndexByte(t, '#'); i >= 0 {
		t = t[:i]
	}
	i := strings.Index(t, "://")
	if i < 0 || !r.URL.IsAbs() {
		return r.URL.RequestURI()
	}
	t = t[i+3:]
	switch j := strings.IndexAny(t, "/?"); {
	case j < 0:
		return "/"
	case t[j] == '?':
		return "/" + t[j:] // RFC 9112 section 3.2.1: an empty path is sent as "/"
	default:
		return t[j:]
	}
}

// setRawTarget makes the Transport send out's target as the client sent
// it (originTarget): its URL's Opaque, which URL.RequestURI writes as it
// is (its RawQuery is raw already), holds the path, or "//host" and the
// path for an http:// upstream (proxy), so that the request line gets the
// absolute form. A path that begins with "//" cannot go in Opaque in
// origin form (it would read as an authority), nor a host net/http would
// rewrite (punycode, a zone) in absolute form: those keep the Transport's
// escaping.
func setRawTarget(out *http.Request, target string, proxy bool) {
	path, _, _ := strings.Cut(target, "?")
	out.URL.Opaque = ""
	switch {
	case proxy && validHost(out.URL.Host):
		out.URL.Opaque = "//" + out.URL.Host + path
	case !proxy && !strings.HasPrefix(path, "//"):
		out.URL.Opaque = path
	}
}

// fwdSkipHeader reports whether request header k is not forwarded: rotor
// writes it itself (Host, User-Agent, framing), it is hop-by-hop, or the
// client's Connection header names it.
func fwdSkipHeader(k string, conn []string) bool {
	switch k {
	case "Host", "User-Agent", "Content-Length":
		return true
	}
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	for _, f := range conn {
		for name := range strings.SplitSeq(f, ",") {
			if strings.EqualFold(strings.TrimSpace(name), k) {
				return true
			}
		}
	}
	return false
}

// writeHeaderLine writes one header field, with CR and LF in the value
// turned into spaces as net/http does.
func writeHeaderLine(w *bufio.Writer, k, v string) {
	if strings.ContainsAny(v, "\r\n") {
		v = strings.NewReplacer("\r", " ", "\n", " ").Replace(v)
	}
	w.WriteString(k)
	w.WriteString(": ")
	w.WriteString(strings.TrimSpace(v))
	w.WriteString("\r\n")
}

// rawHead is the head of the request w answers as it came, nil when w
// does not keep it (see h1Writer.head).
func rawHead(w http.ResponseWriter) []byte {
	if h, ok := w.(interface{ head() []byte }); ok {
		return h.head()
	}
	return nil
}

// fwdBody is an answer's body from a fwdClient. Read to its end, it
// returns the connection to the pool; closed before, it closes the
// connection (reading the rest could take for ever). Close may run while
// a Read blocks (writeResponse's stall timer): it unblocks it.
type fwdBody struct {
	fc    *fwdClient
	pc    *fwdConn
	body  io.ReadCloser
	stop  func() bool // ends the cancel watch of the exchange
	reuse bool
	eof   bool        // Read saw the end; only Read touches it
	done  atomic.Bool // the connection was handed back or closed
}

func (b *fwdBody) Read(p []byte) (int, error) {
	if b.eof {
		return 0, io.EOF
	}
	if b.done.Load() {
		return 0, errFwdBodyClosed
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.eof = true
	}
	if err == io.EOF && b.done.CompareAndSwap(false, true) {
		// A watch that already fired left a past deadline on the conn;
		// bytes past the answer mean the framing is off. Neither is reused.
		if b.stop() && b.reuse && b.pc.br.Buffered() == 0 {
			b.fc.put(b.pc)
		} else {
			_ = b.pc.c.Close()
		}
	}
	return n, err
}

func (b *fwdBody) Close() error {
	if b.done.CompareAndSwap(false, true) {
		b.stop()
		_ = b.pc.c.Close()
	}
	return nil
}

var errFwdBodyClosed = errors.New("http: read on closed response body")

// notHTTPConn is a fresh connection to an http:// or https:// upstream
// whose first bytes are checked: an answer that does not begin as HTTP
// does ("HTTP/") comes from no HTTP proxy (a SOCKS5 server answers 05 FF
// to a request line) and no target either, since an HTTP proxy relays a
// target's nonsense as an error of its own. Its first read fails then
// with the upstream's failure (notHTTPFailure): the upstream is cooled,
// as its probe would. The request was written by then, and the upstream
// may have forwarded it before answering nonsense: only a request that
// can be sent again goes to another upstream. Only a fresh connection's
// first answer is checked: on a kept-alive one the bytes could be the end
// of an earlier answer (fwdClient.roundTrip sends the request again on a
// fresh connection then).
type notHTTPConn struct {
	net.Conn
	seen int // bytes of the answer checked so far, up to len("HTTP/")
}

// guardNotHTTP wraps c, a new connection to an http:// or https://
// upstream, in a notHTTPConn (nil stays nil).
func guardNotHTTP(c net.Conn) net.Conn {
	if c == nil {
		return nil
	}
	return &notHTTPConn{Conn: c}
}

func (c *notHTTPConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.seen < len(httpPrefix) && n > 0 {
		m := min(n, len(httpPrefix)-c.seen)
		if string(p[:m]) != httpPrefix[c.seen:c.seen+m] {
			return 0, notHTTPFailure(p[:n])
		}
		c.seen += m
	}
	return n, err
}

// httpPrefix begins every HTTP/1.x status line (RFC 9112 section 4).
const httpPrefix = "HTTP/"

// notHTTP reports whether b, the first bytes of an answer, cannot begin
// an HTTP/1.x status line.
func notHTTP(b []byte) bool {
	m := min(len(b), len(httpPrefix))
	return m > 0 && string(b[:m]) != httpPrefix[:m]
}

// notHTTPFailure is the failure of an upstream that answered b, which is
// not HTTP, to a forwarded request: upstream_error (no HTTP proxy answers
// so, whatever its target did), at first_byte, since the request had been
// written to it (both clients read an answer only once they wrote): the
// upstream may have sent it on, so a request that cannot be replayed is
// not sent to another one (beforeRequest is false).
func notHTTPFailure(b []byte) *health.Failure {
	return &health.Failure{Class: health.UpstreamError, Stage: health.StageFirstByte,
		Err: errors.New("the upstream's answer is not HTTP (not an HTTP proxy?): " + upstream.PeerText(strconv.Quote(string(b[:min(len(b), 16)]))))}
}
