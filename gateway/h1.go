package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The HTTP proxy front runs its own HTTP/1.1 keep-alive loop instead of
// net/http's Server (issue #8): per request the Server starts a
// background-read goroutine (a read(2) that fails with EAGAIN, a park, a
// deadline to abort it, a wake-up), a cancellable context and its chunking
// writer, about a sixth of the gateway's CPU on plain-HTTP forwarding.
// Requests are still parsed by net/http (http.ReadRequest) and checked as
// its Server checks them (Host, header names and values, header size), and
// proxyHandler serves them through a small ResponseWriter with the same
// framing rules: Content-Length when the handler set it or finished within
// h1SmallBody, chunked otherwise (close-delimited for HTTP/1.0), no body
// for HEAD, 1xx, 204 and 304. The admin front keeps net/http.
//
// A client that leaves while its request is served cancels the request's
// context, as with net/http, so the upstream exchange ends at once and is
// not blamed: instead of a read kept pending on every request, a timer
// peeks at the socket every h1ClientCheck while a request runs longer.
// A reset there, or an EOF (the client closed, or ended its sending
// side), means the client left (checkClient).
// A client that takes nothing of its answer for h1SendIdle left too
// (sendLimit): it is not waited on for ever.

const (
	// h1MaxHeader bounds a request's head (net/http's MaxHeaderBytes was
	// 64 KiB, plus the 4 KiB slack it adds).
	h1MaxHeader = 64<<10 + 4096
	// h1IdleTimeout bounds the wait for the next request on a kept-alive
	// connection (as the Server's IdleTimeout was).
	h1IdleTimeout = 120 * time.Second
	// h1SmallBody: a handler that finishes having written at most this
	// much gets a Content-Length instead of chunked framing.
	h1SmallBody = 2048
	// h1BufSize is the size of each connection's read and write buffers.
	h1BufSize = 4096
	// h1ClientCheck is how often a running request checks that its client
	// is still connected.
	h1ClientCheck = 100 * time.Millisecond
	// h1LingerTime bounds the drain of a client still sending after an
	// answer that closes the connection with request bytes unread (an
	// early 413 to an upload), so the close does not reset the connection
	// before the answer is read: a client that sends its whole body
	// before it reads (Python's http.client) fails its send on the reset
	// and never reads the answer. nginx's lingering_time is 30 s.
	h1LingerTime = 5 * time.Second
	// h1LingerIdle ends that drain earlier when the client sends nothing
	// for this long (nginx's lingering_timeout): it has stopped sending,
	// and the close sends a FIN, not a reset.
	h1LingerIdle = time.Second
	// h1LingerBytes caps what the drain reads: a loopback client sends
	// 1 MiB (the old cap) in a few milliseconds, long before it reads.
	h1LingerBytes = 1 << 30
	// h1BodyIdle bounds each wait for the next bytes of a request body
	// (nginx's client_body_timeout is the same): a client that trickles
	// or stops its body would otherwise hold its connection, goroutine
	// and upstream exchange for ever.
	h1BodyIdle = 60 * time.Second
	// h1SendIdle bounds each wait to write to a client that takes nothing
	// of its answer (the same limit for the other direction): one that
	// stops reading would otherwise hold its connection, goroutine and
	// upstream exchange for ever (sendLimit).
	h1SendIdle = 60 * time.Second
)

// errHeaderTooLarge ends a request head longer than h1MaxHeader.
var errHeaderTooLarge = errors.New("request header too large")

// errClientStalled is the error of a write to a client that took nothing
// of its answer for the send limit, and the cause of its request's
// context then cancelled (sendLimit).
var errClientStalled = errors.New("it took nothing of the answer")

// h1Front tracks the HTTP front's connections for Shutdown.
type h1Front struct {
	handler  http.Handler  // proxyHandler
	bodyIdle time.Duration // h1BodyIdle; tests shorten it before serving
	sendIdle time.Duration // h1SendIdle when zero; tests shorten it before serving

	mu      sync.Mutex
	conns   map[*h1Conn]struct{}
	closing bool
	wg      sync.WaitGroup
	// ended is closed once every connection has ended after stop (nil
	// before it).
	ended chan struct{}
}

// h1Conn is one client connection of the HTTP front.
type h1Conn struct {
	s       *Server
	c       net.Conn
	remote  string
	lr      headLimit
	scan    headScan // the request head being read (lr feeds it)
	br      *bufio.Reader
	sl      sendLimit
	bw      *bufio.Writer
	release func() // the connection-limit slot

	idle       bool // waiting for a request: Shutdown may close it (h1Front.mu)
	hijacked   bool
	badFraming bool  // the request's framing is suspect: close after its answer (serve)
	headAt     int64 // lr.total at the running request's first byte
	// left: the client left while a request ran (checkClient cancelled
	// it); nothing more is written to it, and the connection closes.
	left atomic.Bool
	// answered: the running request's answer began (its head is in bw)
	// or the connection was hijacked. The drain's cut closes such a
	// connection at once, and lets the others answer first (h1Front.cut).
	answered atomic.Bool

	// imu serialises the writes to bw that may run off the handler's
	// goroutine while it waits for the target's answer in the Transport:
	// a target's 1xx relayed from its read loop (h1Writer.interim) and
	// 100 Continue from its write loop (h1Body.Read).
	imu sync.Mutex

	wmu    sync.Mutex              // guards the fields below (the client watch)
	cancel context.CancelCauseFunc // the running request's; nil between requests
	// tunnelBytes: the running request is a CONNECT whose client sent
	// bytes for its tunnel after it (checkClient).
	tunnelBytes bool
	watch       *time.Timer // runs checkClient while a request is served
}

// peerState is what a peek at the client's socket found (peekClient).
type peerState int

const (
	peerOpen peerState = iota // bytes queued, or nothing yet
	peerEOF                   // the client ended its sending side (closed, or half-closed)
	peerGone                  // reset, or another error
)

// headLimit is the reader under the connection's bufio.Reader: while a
// request head is read it allows at most remain bytes and shows them to
// scan; while a body is read (idle > 0) each read must bring bytes
// within idle.
type headLimit struct {
	c      net.Conn
	remain int64
	scan   *headScan    // non-nil while a head is read (serve's goroutine only)
	idle   atomic.Int64 // a time.Duration; the body may be read on another goroutine (the Transport's)
	total  atomic.Int64 // bytes read from the client, for rotor_bytes_total
}

func (l *headLimit) Read(p []byte) (int, error) {
	if l.remain <= 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.remain {
		p = p[:l.remain]
	}
	if d := time.Duration(l.idle.Load()); d > 0 {
		_ = l.c.SetReadDeadline(time.Now().Add(d))
	}
	n, err := l.c.Read(p)
	l.remain -= int64(n)
	l.total.Add(int64(n))
	if l.scan != nil {
		l.scan.feed(p[:n])
		if errors.Is(err, os.ErrDeadlineExceeded) {
			l.scan.timedOut = true
		}
	}
	return n, err
}

// sendLimit is the writer under the connection's bufio.Writer: the client
// must take some of its answer within idle while rotor waits to write, or
// it is taken for gone (stalled): one that stops reading, its receive
// window full, would otherwise hold its connection, goroutine and
// upstream exchange as long as it likes. A slow reader that keeps reading
// is not cut, however long its answer takes.
//
// After a write that waited, the socket tells whether data left for the
// client since the wait began (sentWithin, TCP_INFO): that the write took
// some bytes says little, as the kernel takes a few hundred more into a
// full send buffer at each zero-window probe while the client reads
// nothing. Where the socket cannot tell (off Linux), a write that took
// bytes since then stands for progress.
//
// A deadline the handler set (h1Writer.SetWriteDeadline) replaces the
// limit until it clears it.
type sendLimit struct {
	hc    *h1Conn
	idle  time.Duration
	fixed atomic.Bool // the handler's own deadline is on the connection

	// The writer's own (one write at a time):
	since time.Time // start of the wait in which the client was last seen taking nothing; zero when it took some
	moved time.Time // when a write last took bytes
	total int64     // bytes written to the client, for rotor_bytes_total
}

func (l *sendLimit) Write(p []byte) (n int, err error) {
	defer func() { l.total += int64(n) }()
	c := l.hc.c
	if l.fixed.Load() || l.idle <= 0 {
		return c.Write(p)
	}
	for {
		start := time.Now()
		deadline := start.Add(l.idle)
		if !l.since.IsZero() {
			deadline = l.since.Add(l.idle) // the clock of a wait without progress runs on
		}
		_ = c.SetWriteDeadline(deadline)
		m, err := c.Write(p[n:])
		n += m
		now := time.Now()
		if m > 0 {
			l.moved = now
		}
		timedOut := errors.Is(err, os.ErrDeadlineExceeded)
		if timedOut || now.Sub(start) >= l.idle/16 {
			// This write waited on the client: did it take anything
			// since the wait began?
			from := start
			if !l.since.IsZero() {
				from = l.since
			}
			if l.took(from, now) {
				l.since = time.Time{}
			} else if l.since.IsZero() {
				l.since = start
			}
		}
		if !timedOut {
			return n, err
		}
		if !l.since.IsZero() && now.Sub(l.since) >= l.idle {
			return n, l.hc.stalled(l.idle)
		}
	}
}

// took reports whether the client took some of its answer between from
// and now.
func (l *sendLimit) took(from, now time.Time) bool {
	if sent, ok := sentWithin(l.hc.c, now.Sub(from)); ok {
		return sent
	}
	return l.moved.After(from)
}

// stalled ends a connection whose client took nothing of its answer for
// idle, and returns the error its write fails with (forward.go logs the
// request client_gone with it): the running request is cancelled, so the
// upstream exchange ends wherever it is, and the close that follows
// resets the connection, as the bytes still queued for a client that
// reads nothing would only wait in the kernel.
func (hc *h1Conn) stalled(idle time.Duration) error {
	err := fmt.Errorf("%w for %s", errClientStalled, idle)
	hc.wmu.Lock()
	if hc.cancel != nil {
		hc.cancel(err)
		hc.cancel = nil
	}
	hc.wmu.Unlock()
	if tc := tcpOf(hc.c); tc != nil {
		_ = tc.SetLinger(0)
	}
	return err
}

// acceptHTTP serves the HTTP proxy front's listener until it is closed.
func (s *Server) acceptHTTP(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, ok := s.accept(ln, "http")
		if !ok {
			return
		}
		release, ok := s.limits.acquire("http", c)
		if !ok {
			_, _ = c.Write([]byte("HTTP/1.1 503 Service Unavailable\r\nX-Rotor-Error: limit\r\nContent-Type: text/plain\r\nConnection: close\r\nContent-Length: 31\r\n\r\nconnection limit reached, retry"))
			_ = c.Close()
			s.metrics.tunnelDone("http", "refused_limit")
			continue
		}
		hc := &h1Conn{s: s, c: c, remote: c.RemoteAddr().String(), release: release}
		if !s.h1.add(hc) {
			_ = c.Close()
			release()
			continue
		}
		go func() { // owner: h1Front (wg); ends when the connection closes or is hijacked
			defer s.h1.done(hc)
			hc.serve()
		}()
	}
}

func (f *h1Front) add(hc *h1Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	if f.conns == nil {
		f.conns = map[*h1Conn]struct{}{}
	}
	f.conns[hc] = struct{}{}
	f.wg.Add(1)
	return true
}

func (f *h1Front) done(hc *h1Conn) {
	f.mu.Lock()
	delete(f.conns, hc)
	f.mu.Unlock()
	f.wg.Done()
}

// setIdle marks hc as waiting for a request (or not). It reports false
// when the front is shutting down: the connection should end.
func (f *h1Front) setIdle(hc *h1Conn, idle bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	hc.idle = idle
	return !f.closing
}

// stop begins the drain of the front: no connection is added any more,
// idle ones are closed, and the others end after their request (setIdle).
// It is called once, by Shutdown.
func (f *h1Front) stop() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closing = true
	for hc := range f.conns {
		if hc.idle {
			_ = hc.c.Close()
		}
	}
	if f.ended != nil {
		return
	}
	f.ended = make(chan struct{})
	go func() { // owner: Shutdown, which waits for ended; ends when every connection goroutine has ended
		f.wg.Wait()
		close(f.ended)
	}()
}

// wait blocks until every connection has ended (true) or ctx ends
// (false). stop must have been called.
func (f *h1Front) wait(ctx context.Context) bool {
	select {
	case <-f.ended:
		return true
	case <-ctx.Done():
		return false
	}
}

// cut ends the front's connections once the drain's grace is over. The
// running requests are cancelled: one waiting for an upstream or dialling
// ends now, and one whose answer has not begun yet is told so (503
// canceled, as a SOCKS5 client gets 0x01): only its read side is shut, so
// that a read of its body ends too, and the connection closes after the
// answer. Every other connection (an answer under way, a tunnel not yet
// registered, a head being read) is closed at once. cut counts the
// requests running and takes them from their connections now, and returns
// the count and what cuts them, for the caller to run after its line.
func (f *h1Front) cut() (int, func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	var do []func()
	for hc := range f.conns {
		hc.wmu.Lock()
		cancel := hc.cancel
		hc.cancel = nil
		hc.wmu.Unlock()
		if cancel != nil {
			n++
		}
		do = append(do, func() {
			if cancel != nil {
				cancel(errDrainCut)
				if !hc.answered.Load() {
					if tc := tcpOf(hc.c); tc != nil && tc.CloseRead() == nil {
						return
					}
				}
			}
			_ = hc.c.Close()
		})
	}
	return n, func() {
		for _, d := range do {
			d()
		}
	}
}

// serve runs the keep-alive loop: read a request, serve it, until the
// client or the answer ends the connection or it is hijacked (CONNECT).
func (hc *h1Conn) serve() {
	s := hc.s
	defer func() {
		if v := recover(); v != nil && v != http.ErrAbortHandler {
			s.panicked("http", 0, hc.c, v) // logs and closes the connection
		}
		if !hc.hijacked {
			_ = hc.c.Close()
			hc.release()
		}
	}()
	hc.lr.c = hc.c
	hc.br = bufio.NewReaderSize(&hc.lr, h1BufSize)
	hc.sl = sendLimit{hc: hc, idle: s.h1.sendIdle}
	if hc.sl.idle == 0 {
		hc.sl.idle = h1SendIdle
	}
	hc.bw = bufio.NewWriterSize(&hc.sl, h1BufSize)
	hdrTimeout := s.cfg.Load().Listen.HandshakeTimeout
	// headTimeout is the deadline a head that began is cut off by.
	headTimeout := hdrTimeout
	if headTimeout <= 0 {
		headTimeout = h1IdleTimeout
	}
	for first := true; ; first = false {
		// Waiting for a request's first byte the connection is idle:
		// Shutdown closes it. The first request's head is bounded by the
		// handshake timeout from the accept, later ones wait up to
		// h1IdleTimeout for their first byte.
		if !first {
			_ = hc.c.SetReadDeadline(time.Now().Add(h1IdleTimeout))
		} else if hdrTimeout > 0 {
			_ = hc.c.SetReadDeadline(time.Now().Add(hdrTimeout))
		}
		// Bytes read from here on (the Peek too) count against the head's
		// size limit, and are scanned with those already buffered.
		hc.lr.remain = h1MaxHeader
		hc.scan.reset()
		if n := hc.br.Buffered(); n > 0 {
			b, _ := hc.br.Peek(n)
			hc.scan.feed(b)
		}
		hc.lr.scan = &hc.scan
		if hc.br.Buffered() == 0 {
			if !s.h1.setIdle(hc, true) {
				return
			}
			_, err := hc.br.Peek(1)
			if !s.h1.setIdle(hc, false) || err != nil {
				return
			}
		}
		// A head that is not all here yet must come within the handshake
		// timeout (a whole head, the usual case, needs no new deadline).
		if !first && hdrTimeout > 0 && !headBuffered(hc.br) {
			_ = hc.c.SetReadDeadline(time.Now().Add(hdrTimeout))
		}
		// Empty lines before a request line are ignored (RFC 9112
		// section 2.2): some clients send a CRLF after a POST body.
		for i := 0; i < 4; i++ {
			if b, err := hc.br.Peek(1); err != nil || (b[0] != '\r' && b[0] != '\n') {
				break
			}
			_, _ = hc.br.Discard(1)
		}
		// A connection's first byte tells a SOCKS5 or TLS client, which
		// would otherwise wait out the head's deadline for a 408.
		if b, err := hc.br.Peek(1); first && err == nil && (b[0] == socks5Version || b[0] == socks4Version || b[0] == tlsHandshakeRecord) {
			hc.refuseOtherProtocol(b[0])
			return
		}
		hc.headAt = hc.lr.total.Load() - int64(hc.br.Buffered())
		stray, long := straySink(hc.br)
		req, err := http.ReadRequest(hc.br)
		if err == nil && stray != "" && !restoreStray(&req.RequestURI, &req.URL, stray) {
			err = errors.New("malformed request target")
		}
		if err != nil && long && longStray(err) {
			err = fmt.Errorf("%w: %w", errLongStray, err)
		}
		// A head that used up the limit is too large whatever error the
		// parser saw: a limit that cuts a short line in two makes a
		// malformed line of it, not an errHeaderTooLarge.
		tooLarge := hc.lr.remain <= 0
		hc.lr.remain = 1<<63 - 1
		hc.lr.scan = nil
		if err != nil {
			hc.readError(err, tooLarge, hc.scan.timedOut && hc.scan.started(), headTimeout)
			return
		}
		// http.ReadRequest drops Content-Length when Transfer-Encoding is
		// chunked, and Transfer-Encoding from an HTTP/1.0 request: the
		// head as it came (headScan) says whether the client sent both,
		// or a Transfer-Encoding it ignored. An HTTP/1.0 request with one
		// MUST be treated as faulty framing (RFC 9112 section 6.1): its
		// chunked body went on as an empty one (or by a Content-Length the
		// field contradicts), and the client got the target's answer to a
		// request the target never saw whole. It is refused with a 400,
		// what section 6.3 gives a faulty framing, rather than decoded as
		// squid does: no HTTP/1.0 recipient can be relied on to read it
		// so (the fix for an old client is HTTP/1.1). Both fields in an
		// HTTP/1.1 request are suspect too (a request smuggling attempt,
		// section 11.2): served by Transfer-Encoding, and the connection
		// MUST close after the answer (section 6.3).
		if hc.scan.te && req.ProtoMajor == 1 && req.ProtoMinor == 0 {
			hc.plain(http.StatusBadRequest, "bad_request",
				"Transfer-Encoding in an HTTP/1.0 request (RFC 9112 section 6.1): send it as HTTP/1.1, or with a Content-Length alone")
			hc.lingerClose()
			return
		}
		hc.badFraming = hc.scan.te && hc.scan.cl
		if hc.badFraming {
			req.Close = true
		}
		// The handler reads a body with h1BodyIdle per read (headLimit)
		// instead of the head's deadline; a CONNECT clears deadlines
		// itself, and nothing else reads the client meanwhile.
		if req.Body != http.NoBody {
			_ = hc.c.SetReadDeadline(time.Time{})
			hc.lr.idle.Store(int64(s.h1.bodyIdle))
		}
		ok := hc.serveRequest(req)
		hc.lr.idle.Store(0)
		if !ok {
			return
		}
	}
}

// serveRequest serves one request; it reports whether the connection may
// carry another.
func (hc *h1Conn) serveRequest(req *http.Request) bool {
	if msg := checkRequest(req, hc.scan.host); msg != "" {
		if req.ProtoMajor != 1 {
			// The HTTP/2 preface ("PRI * HTTP/2.0") lands here too.
			hc.plain(http.StatusHTTPVersionNotSupported, "bad_request",
				"unsupported protocol version "+strconv.Quote(req.Proto)+": rotor's proxy port speaks HTTP/1.1")
		} else {
			hc.plain(http.StatusBadRequest, "bad_request", msg)
		}
		return false
	}
	if !expectsOnlyContinue(req.Header) {
		// RFC 9110 section 10.1.1: an expectation rotor cannot meet gets
		// 417, with a body or without one; forwarded, a target would have
		// to judge an expectation of the proxy's.
		hc.plain(http.StatusExpectationFailed, "bad_request", "unsupported Expect: rotor knows only 100-continue")
		hc.lingerClose()
		return false
	}
	req.RemoteAddr = hc.remote
	// Not derived from the server's context: registering with it would
	// take its lock on every request. Shutdown cancels running requests
	// through the client watch when its grace runs out.
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	req = req.WithContext(ctx)
	hc.sl.fixed.Store(false)
	hc.answered.Store(false)
	w := &h1Writer{hc: hc, req: req, h: http.Header{}, cl: -1}
	body := &h1Body{r: req.Body, br: hc.br}
	body.buffered.Store(int64(hc.br.Buffered()))
	if req.Body == nil || req.Body == http.NoBody {
		body.eof.Store(true)
	} else {
		if req.ProtoAtLeast(1, 1) && hasToken(req.Header, "Expect", "100-continue") {
			body.w = w // "100 Continue" before the first read
		}
		req.Body = body
	}
	sent := hc.sl.total
	hc.handle(w, req, body, cancel)
	if hc.hijacked {
		return false // the tunnel counts its bytes
	}
	left := hc.left.Load() // stable: the watch is stopped
	if !left {
		w.finish() // for a client that left, nothing: squid's abort sends none either
	}
	// A forwarded request's bytes as they crossed the client's socket,
	// heads included, as a tunnel's are counted: what it took of the
	// client's bytes (not what a read took ahead of it) and what it sent.
	hc.s.metrics.bytes(hc.lr.total.Load()-body.buffered.Load()-hc.headAt, hc.sl.total-sent)
	if left || w.err != nil || w.reset {
		return false
	}
	if !body.eof.Load() || hc.badFraming {
		// A body the handler left unread is still on the wire (or, with a
		// suspect framing, what follows the body may be part of it):
		// closing is simpler and safer than reading it to find the next
		// request.
		hc.lingerClose()
		return false
	}
	return !w.closeAfter
}

// handle runs the proxy handler with the client watched.
func (hc *h1Conn) handle(w *h1Writer, req *http.Request, body *h1Body, cancel context.CancelCauseFunc) {
	hc.startWatch(cancel, req.Method == http.MethodConnect && body.buffered.Load() > 0)
	defer hc.stopWatch()
	hc.s.h1.handler.ServeHTTP(w, req)
}

// startWatch arms the client check for the request cancel belongs to;
// tunnelBytes says it is a CONNECT followed by bytes for its tunnel.
func (hc *h1Conn) startWatch(cancel context.CancelCauseFunc, tunnelBytes bool) {
	hc.wmu.Lock()
	defer hc.wmu.Unlock()
	hc.cancel = cancel
	hc.tunnelBytes = tunnelBytes
	if hc.watch == nil {
		hc.watch = time.AfterFunc(h1ClientCheck, hc.checkClient)
	} else {
		hc.watch.Reset(h1ClientCheck)
	}
}

// stopWatch disarms it once the handler returned.
func (hc *h1Conn) stopWatch() {
	hc.wmu.Lock()
	defer hc.wmu.Unlock()
	hc.cancel = nil
	hc.watch.Stop()
}

// checkClient cancels the running request when its client has left: it
// reset the connection, or ended its sending side (EOF, with nothing
// queued before it). That is how clients close when they give up on a
// request (requests, aiohttp, httpx, curl -m), and TCP cannot tell it from
// a half-close after which a client would still read (RFC 9112 section
// 9.6): like squid by default (half_closed_clients off) and the SOCKS5
// front, rotor takes it for the client gone, during the wait for an
// upstream, the dial, the exchange and the answer alike; the answer is
// not written, and requests pipelined behind it are not served. One
// exception, as on the SOCKS5 front: a CONNECT whose client sent bytes for
// its tunnel with it has sent what the tunnel needs, and its half-close
// goes through the tunnel. Otherwise it checks again later.
func (hc *h1Conn) checkClient() {
	hc.wmu.Lock()
	defer hc.wmu.Unlock()
	if hc.cancel == nil {
		return
	}
	switch peekClient(hc.c) {
	case peerGone:
		hc.leave()
		return
	case peerEOF:
		if !hc.tunnelBytes {
			hc.leave()
			return
		}
	}
	hc.watch.Reset(h1ClientCheck)
}

// leave cancels the running request of a client that left (checkClient;
// wmu held): the exchange ends wherever it is, is logged client_gone and
// blames no upstream, and the connection closes without an answer.
func (hc *h1Conn) leave() {
	hc.left.Store(true)
	hc.cancel(nil)
	hc.cancel = nil
}

// lingerClose ends a connection whose client may still be sending (an
// unread body, an oversized head): it sends the answer and a FIN, then
// reads and drops what comes until the client closes or sends nothing for
// h1LingerIdle, for up to h1LingerTime and h1LingerBytes, so the close
// that follows does not reset the connection and destroy the answer in
// flight (or fail the send of a client that reads only after it).
func (hc *h1Conn) lingerClose() {
	_ = hc.bw.Flush()
	if tc, ok := hc.c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	end := time.Now().Add(h1LingerTime)
	buf := make([]byte, 32<<10)
	for left := int64(h1LingerBytes); left > 0; {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		deadline := now.Add(h1LingerIdle)
		if deadline.After(end) {
			deadline = end
		}
		_ = hc.c.SetReadDeadline(deadline)
		n, err := hc.c.Read(buf[:min(int64(len(buf)), left)])
		left -= int64(n)
		if err != nil {
			return // the client's end, the idle bound, or the connection closed (the drain's cut)
		}
	}
}
