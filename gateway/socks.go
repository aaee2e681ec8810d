package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"time"

	socks5 "github.com/armon/go-socks5"

	"github.com/rotor-proxy/rotor/upstream"
)

// SOCKS5 reply codes (RFC 1928 section 6).
const (
	repSuccess          = 0x00
	repGeneralFailure   = 0x01
	repNotAllowed       = 0x02
	repNetUnreachable   = 0x03
	repHostUnreachable  = 0x04
	repConnRefused      = 0x05
	repTTLExpired       = 0x06
	repCmdNotSupported  = 0x07
	repAddrNotSupported = 0x08
)

// errHandled tells go-socks5 that rotor already answered the client (and
// relayed the tunnel, when it succeeded). Its own reply is swallowed.
var errHandled = errors.New("handled by rotor")

func (s *Server) acceptSOCKS(ln net.Listener) {
	defer s.wg.Done()
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		c, ok := s.accept(ln, "socks5")
		if !ok {
			return
		}
		release, ok := s.limits.acquire("socks5", c)
		if !ok {
			s.refuseSOCKS(c, &conns)
			continue
		}
		conns.Add(1)
		go func() { // owner: acceptSOCKS; ends when the handshake is over (the tunnel runs on)
			defer conns.Done()
			s.serveSOCKS(c, release)
		}()
	}
}

// accept returns the front's next connection, backing off on temporary
// errors (EMFILE and friends) instead of spinning; false once ln is closed.
func (s *Server) accept(ln net.Listener, front string) (net.Conn, bool) {
	delay := 5 * time.Millisecond
	for {
		c, err := ln.Accept()
		if err == nil {
			return c, true
		}
		if errors.Is(err, net.ErrClosed) {
			return nil, false
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// Out of file descriptors, every accept fails until some close:
		// one line per acceptLogEvery says so (with how many failed since),
		// not one per 50 ms per front.
		if now := time.Now().UnixNano(); now-s.acceptErrAt.Load() >= int64(acceptLogEvery) {
			s.acceptErrAt.Store(now)
			s.log.Error().Err(err).Str("listener", front).Int64("failed_since_last", s.acceptErrs.Swap(0)).
				Msg("accept failed (rotor is short of file descriptors? raise its limit: ulimit -n, LimitNOFILE, docker --ulimit nofile)")
		} else {
			s.acceptErrs.Add(1)
		}
		time.Sleep(delay)
		delay = min(2*delay, time.Second)
	}
}

// acceptLogEvery spaces the log lines of failing accepts.
const acceptLogEvery = 10 * time.Second

// serveSOCKS runs one SOCKS5 client connection. go-socks5 parses the
// greeting, authentication and request; rotor takes over in the Dial hook:
// it picks and dials the upstream, writes the reply itself (so the reply
// code says what really happened, RFC 1928 section 6), and relays the
// tunnel between the raw connections.
//
// rotor reads the greeting itself first, in full, and hands it to
// go-socks5 with username/password moved to the front of the offered
// methods, so that the method chosen does not depend on how the client's
// bytes were cut into TCP segments (go-socks5 takes the first offered
// method it supports, and curl and others list no-auth first).
//
// release frees the connection's limit slot: at return when no tunnel was
// started, else when the tunnel ends.
//
// Until the Dial hook the connection is in s.socksHS, so that the drain
// closes it at once; a handshake the drain cut short is not logged.
func (s *Server) serveSOCKS(c net.Conn, release func()) {
	id := s.connID.Add(1)
	defer s.recoverConn("socks5", id, c)
	detached := false
	defer func() {
		if !detached {
			release()
		}
	}()
	if !s.socksHS.add(c) {
		return
	}
	inHandshake := true
	// leave ends the handshake stage; false when the drain closed c.
	leave := func() bool {
		if !inHandshake {
			return true
		}
		inHandshake = false
		return s.socksHS.done(c)
	}
	defer leave()
	cfg := s.cfg.Load()
	auth := s.auth.Load()
	_ = c.SetDeadline(time.Now().Add(cfg.Listen.HandshakeTimeout))
	hsEnd := s.clock.Now().Add(cfg.Listen.HandshakeTimeout) // a delayed wrong-password answer goes out before it
	read, glen, err := readGreeting(c)
	if err == nil && read[0] != 5 {
		answerNotSOCKS5(c, read, min(time.Second, cfg.Listen.HandshakeTimeout))
		err = errNotSOCKS5
	}
	if err != nil {
		_ = c.Close()
		if leave() {
			s.socksHandshakeFailed(id, c, err, false, "")
		}
		return
	}
	preferMethod(read[:glen], 0x02)
	cc := &socksConn{Conn: c, pre: read, captured: append([]byte(nil), read...)}
	var user string
	userPass := false // the client authenticated with RFC 1929 (maybe with an empty name)
	// Missing (05 FF) or wrong credentials count as client_auth, as a 407 does.
	clientAuth := auth.required() && bytes.IndexByte(read[2:glen], 0x02) < 0
	creds := func(u, p string) bool {
		params := parseUser(u)
		user, userPass = u, true
		clientAuth = !auth.check(params.User, p)
		if clientAuth {
			// The guard may hold the RFC 1929 failure status; the margin
			// leaves time to write it within the connection's deadline.
			s.authFailed("socks5", c.RemoteAddr().String(), auth.loginUser(params.User), hsEnd.Sub(s.clock.Now())-guardMargin, nil)
		}
		return !clientAuth
	}
	authed := false // a method was negotiated and passed
	methods := []socks5.Authenticator{userPassAuth{valid: creds, ok: &authed}}
	if !auth.required() {
		methods = append(methods, noAuth{ok: &authed})
	}
	handled := false
	conf := &socks5.Config{
		AuthMethods: methods,
		Resolver:    noResolve{},
		Logger:      log.New(io.Discard, "", 0),
		Dial: func(_ context.Context, _, addr string) (net.Conn, error) {
			// The request joins s.dials before it leaves the handshakes:
			// the drain closes these, then waits for those, and so sees
			// it in one or the other.
			ctx, cancel := context.WithCancel(s.ctx)
			defer cancel()
			s.dials.add(id, cancel)
			defer s.dials.remove(id)
			if !leave() {
				return nil, errHandled // the drain closed c: nothing to answer
			}
			handled = true
			_ = c.SetDeadline(time.Time{})
			cc.hijack()
			detached = s.socksTunnel(ctx, id, c, cc.leftover(userPass), parseUser(user), addr, release)
			return nil, errHandled
		},
	}
	srv, err := socks5.New(conf)
	if err != nil {
		_ = c.Close()
		return
	}
	err = srv.ServeConn(cc)
	if !handled {
		if authed && cc.requestVersion(userPass) != 5 {
			// go-socks5 closes silently on a request whose VER is not 5
			// (it answers a bad CMD or ATYP itself): general failure.
			_, _ = c.Write(socksReply(repGeneralFailure, nil))
		}
		_ = c.Close()
		if leave() {
			s.socksHandshakeFailed(id, c, err, clientAuth, user)
		}
	}
}

// socksHandshakeFailed logs and counts a client that did not get as far as
// a request rotor could act on (clientAuth: for want of valid credentials;
// user is the RFC 1929 username it sent, logged by its base name as the
// HTTP front's 407 line does, never with the password).
// A client that left before its first byte is not worth a line.
func (s *Server) socksHandshakeFailed(id uint64, c net.Conn, err error, clientAuth bool, user string) {
	if err == nil || errors.Is(err, io.EOF) {
		return
	}
	ev := s.log.Debug().Uint64("conn_id", id).Str("listener", "socks5").Str("client", c.RemoteAddr().String())
	if u := parseUser(user).User; clientAuth && u != "" {
		ev = ev.Str("user", s.auth.Load().loginUser(u))
	}
	ev.Err(err).Msg("socks5 handshake failed")
	if clientAuth {
		s.metrics.tunnelDone("socks5", "client_auth")
		return
	}
	s.metrics.tunnelDone("socks5", "handshake_error")
}

// readGreeting reads a SOCKS5 greeting in full: VER, NMETHODS, then
// exactly NMETHODS bytes (RFC 1928 section 3), however the client's bytes
// are segmented. It returns what it read, which may run past the greeting
// (a client that pipelines its auth and request: one read usually gets it
// all), and the greeting's length. With a version other than 5 it stops
// after two bytes and leaves the verdict to go-socks5.
func readGreeting(r io.Reader) ([]byte, int, error) {
	b := make([]byte, 0, 512)
	for need := 2; len(b) < need; {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if len(b) >= 2 {
			if b[0] != 5 {
				return b, 2, nil
			}
			need = 2 + int(b[1])
		}
		if len(b) >= need {
			return b, need, nil
		}
		if err != nil {
			if len(b) > 0 {
				return nil, 0, fmt.Errorf("read greeting: %w", err)
			}
			return nil, 0, err
		}
	}
	return b, 2 + int(b[1]), nil
}

// errBadTarget answers a SOCKS5 request whose domain name is neither a DNS
// name nor an IP literal.
var errBadTarget = errors.New("invalid target")

// socksTunnel dials the target through the pool and starts the relay. It
// reports whether a tunnel now owns c (and will call release). ctx is the
// request's, in s.dials until the dial is over: the drain waits for it up
// to shutdown_grace, as for a request on the HTTP front, then cancels it.
//
// A target the HTTP front would refuse too (badTarget: a host that is
// not a valid host, see validTargetHost, or port 0) is answered 0x04 host
// unreachable before any upstream is picked, with the HTTP front's log
// line: the client's doing, at info, with no class or stage (issue: port
// 0 went on to the pool and was logged as a target_unreachable failure
// at target_connect). The check for
// rotor's own listeners comes first: it is string work only, and it
// answers the empty host (the local system, to net.Dial) "not allowed".
// While rotor waits for an upstream and dials, a clientWatch cancels the
// dial when the client leaves, which the pool reports to health as
// neither success nor failure.
func (s *Server) socksTunnel(ctx context.Context, id uint64, c net.Conn, pending []byte, params userParams, addr string, release func()) bool {
	start := time.Now()
	if s.selfTarget(addr) {
		_, _ = c.Write(socksReply(repNotAllowed, nil))
		_ = c.Close()
		s.logTunnel(id, "socks5", c, params.User, addr, nil, errSelfTarget, relayResult{}, start)
		return false
	}
	if msg := badTarget(addr); msg != "" {
		_, _ = c.Write(socksReply(repHostUnreachable, nil))
		_ = c.Close()
		s.logTunnel(id, "socks5", c, params.User, logTarget(addr), nil, badTargetError(msg), relayResult{}, start)
		return false
	}
	req := upstream.Request{Addr: addr, Tags: params.Tags, Session: params.Session, User: params.User}
	ctx, cancel := context.WithCancel(ctx)
	w := watchClient(c, cancel)
	lease, err := s.pool.Dial(ctx, req)
	w.stop()
	cancel()
	s.dials.remove(id) // a tunnel from here on: the drain counts it there
	if err != nil {
		_, _ = c.Write(socksReply(socksCode(err), nil))
		_ = c.Close()
		s.logTunnel(id, "socks5", c, params.User, addr, nil, err, relayResult{}, start)
		return false
	}
	_, _ = c.Write(socksReply(repSuccess, lease.Conn.LocalAddr()))
	s.runTunnel(id, "socks5", c, lease, pending, addr, params.User, start, release)
	return true
}

// clientWatch cancels a SOCKS5 request's dial when its client leaves
// while rotor waits for an upstream or dials, as the HTTP front does for
// its requests: every h1ClientCheck it peeks at the socket (peekClient
// consumes nothing, so data the client sent after its request stays
// queued for the tunnel). Its timer goroutine is owned by the watch: once
// stop returns, a check that fires finds done set and returns at once.
type clientWatch struct {
	c      net.Conn
	cancel context.CancelFunc

	mu   sync.Mutex // guards the fields below
	t    *time.Timer
	done bool
}

// watchClient starts watching c; stop it with stop.
func watchClient(c net.Conn, cancel context.CancelFunc) *clientWatch {
	w := &clientWatch{c: c, cancel: cancel}
	w.mu.Lock()
	w.t = time.AfterFunc(h1ClientCheck, w.check)
	w.mu.Unlock()
	return w
}

func (w *clientWatch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	// EOF counts as gone here: a client that ended its sending side
	// with nothing queued has sent nothing for the tunnel.
	if peekClient(w.c) != peerOpen {
		w.done = true
		w.cancel()
		return
	}
	w.t.Reset(h1ClientCheck)
}

// stop ends the watch; c is not touched after it returns.
func (w *clientWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.t.Stop()
}

// socksReply encodes a reply with BND.ADDR from bind (0.0.0.0:0 when nil).
func socksReply(code byte, bind net.Addr) []byte {
	ip := net.IPv4zero.To4()
	port := 0
	if ta, ok := bind.(*net.TCPAddr); ok {
		if v4 := ta.IP.To4(); v4 != nil {
			ip, port = v4, ta.Port
		} else if ta.IP != nil {
			b := []byte{5, code, 0, 4}
			b = append(b, ta.IP.To16()...)
			return append(b, byte(ta.Port>>8), byte(ta.Port))
		}
	}
	b := []byte{5, code, 0, 1}
	b = append(b, ip...)
	return append(b, byte(port>>8), byte(port))
}

// noResolve keeps target names unresolved so the upstream resolves them
// (remote DNS, like socks5h): go-socks5 uses the FQDN when no IP is set.
type noResolve struct{}

func (noResolve) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	return ctx, nil, nil
}

// socksConn is the client connection as go-socks5 sees it. Its reads
// start with the greeting rotor already read (pre), then go to the
// socket. It records the bytes go-socks5 reads during the handshake, so
// that bytes a client sent right after its request (pipelined data) are
// not lost in go-socks5's buffer. Once rotor takes over (hijack)
// go-socks5's writes are swallowed; its close always is.
type socksConn struct {
	net.Conn
	pre []byte // read only by go-socks5's goroutine, the one Read caller

	mu       sync.Mutex // guards the fields below
	captured []byte
	hijacked bool
}

func (c *socksConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil // captured already holds it
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		if !c.hijacked && len(c.captured) < 64<<10 {
			c.captured = append(c.captured, p[:n]...)
		}
		c.mu.Unlock()
	}
	return n, err
}

func (c *socksConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	h := c.hijacked
	c.mu.Unlock()
	if h {
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// Close is go-socks5's close at the end of ServeConn, which rotor does
// itself (serveSOCKS, or the tunnel once hijacked): after a failed
// handshake it may still have an answer to write.
func (c *socksConn) Close() error { return nil }

func (c *socksConn) hijack() {
	c.mu.Lock()
	c.hijacked = true
	c.mu.Unlock()
}

// requestVersion returns the VER byte of the client's SOCKS5 request, or
// 5 when it was not read.
func (c *socksConn) requestVersion(userPass bool) byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := socksRequestStart(c.captured, userPass); n >= 0 {
		return c.captured[n]
	}
	return 5
}

// leftover returns the captured bytes past the end of the SOCKS request:
// data the client pipelined that go-socks5 buffered but never used.
func (c *socksConn) leftover(userPass bool) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := socksHandshakeLen(c.captured, userPass)
	if n < 0 || n >= len(c.captured) {
		return nil
	}
	return append([]byte(nil), c.captured[n:]...)
}

// socksHandshakeLen returns the length of greeting + (auth) + request at
// the start of b, or -1 when b is shorter.
func socksHandshakeLen(b []byte, userPass bool) int {
	n := socksRequestStart(b, userPass)
	if n < 0 {
		return -1
	}
	if len(b) < n+4 {
		return -1
	}
	switch b[n+3] {
	case 1:
		n += 4 + 4
	case 4:
		n += 4 + 16
	case 3:
		if len(b) < n+5 {
			return -1
		}
		n += 4 + 1 + int(b[n+4])
	default:
		return -1
	}
	n += 2
	if n > len(b) {
		return -1
	}
	return n
}

// preferMethod moves method m to the front of a SOCKS5 greeting's method
// list when the client offers it. go-socks5 takes the first offered method
// it supports, and curl and others list no-auth first. b must hold the
// whole greeting (readGreeting), else it is left as it is.
func preferMethod(b []byte, m byte) {
	if len(b) < 2 || b[0] != 5 || len(b) < 2+int(b[1]) {
		return
	}
	methods := b[2 : 2+int(b[1])]
	for i, x := range methods {
		if x == m {
			copy(methods[1:i+1], methods[:i])
			methods[0] = m
			return
		}
	}
}

// validTargetHost reports whether host, the target of a SOCKS5 request,
// is an IP literal or a DNS name (targetHostProblem says "").
func validTargetHost(host string) bool { return targetHostProblem(host) == "" }

// targetHostProblem says why host cannot be a target, or "" when it is an
// IP literal or a DNS name: labels of 1 to 63 letters, digits, '-' or '_'
// separated by dots, at most 253 bytes (plus an optional root dot), the
// last not a number. Anything else (CR, LF, space, NUL, '/', '@', '%'...)
// would travel verbatim into the CONNECT request rotor writes to an HTTP
// upstream.
//
// A host ending in a number that is not a dotted-quad IPv4 literal
// (127.1, 2130706433, 0x7f000001, 127.000.000.001, 10.1) is refused too:
// it is no DNS name, and getaddrinfo and proxies such as squid read it as
// an inet_aton(3) address (127.0.0.1, 10.0.0.1), so rotor's checks for
// its own listeners and for private destinations would judge one address
// while the upstream connects to another. Refusing it leaves nothing to
// interpretation; rewriting it would change the request the client sent
// (the Host header of a forwarded request names it too).
func targetHostProblem(host string) string {
	const notHost = "the host is not a DNS name or an IP address"
	if net.ParseIP(host) != nil {
		return ""
	}
	if host != "" && endsInNumber(host) {
		if a, ok := parseIPv4Shorthand(host); ok {
			return "the host is IPv4 shorthand; write it as " + a.String()
		}
		return notHost
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > 253 {
		return notHost
	}
	label := 0
	for i := 0; i < len(host); i++ {
		switch b := host[i]; {
		case b == '.':
			if label == 0 {
				return notHost
			}
			label = 0
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9', b == '-', b == '_':
			label++
			if label > 63 {
				return notHost
			}
		default:
			return notHost
		}
	}
	return ""
}
