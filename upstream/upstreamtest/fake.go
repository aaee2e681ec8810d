// Package upstreamtest provides in-process fake upstream proxies (SOCKS5 and
// HTTP CONNECT, optionally over TLS) and an HTTP target for tests, all on
// 127.0.0.1:0. Each fake's behaviour is a Mode value that can be switched at
// run time (SetMode), so a test can take an upstream down and bring it back.
//
// It owns no production code and is imported only by tests. Every goroutine
// it starts is stopped and waited for by Close, which t.Cleanup calls.
package upstreamtest

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Fault selects how a fake upstream treats a new connection.
type Fault uint8

// Faults. The zero value Accept is a working proxy.
const (
	// Accept: a working proxy that tunnels to the real target with net.Dial.
	// Mode.Preamble, Mode.FirstByteDelay and Mode.StallAfter shape the data
	// phase.
	Accept Fault = iota
	// Refuse: the listening socket is closed, so connects get ECONNREFUSED.
	// Switching back to another fault listens again on the same address.
	Refuse
	// RejectAuth: the credentials are refused whatever they are (SOCKS5:
	// RFC 1929 status 1, or method 0xFF when the client offers no 02;
	// HTTP: 407 with Proxy-Authenticate).
	RejectAuth
	// NoAcceptableMethod: SOCKS5 answers the greeting with 05 FF (HTTP: as
	// RejectAuth).
	NoAcceptableMethod
	// Reply: after authentication, answer the request with Mode.Code (SOCKS5
	// REP, or HTTP status with Mode.Header and Mode.Reason), then close.
	Reply
	// BlackHole: accept the TCP connection and never send a byte.
	BlackHole
	// HangConnect: complete authentication, read the request, never reply
	// (microsocks with a target that never answers).
	HangConnect
	// Garbage: read the client's first bytes, answer with bytes that are
	// not the protocol (Mode.Garbage or a default), keep the conn open.
	Garbage
	// CloseAfterAccept: close the TCP connection at once.
	CloseAfterAccept
)

// Mode is the behaviour of a fake upstream for connections accepted while
// it is set.
type Mode struct {
	Fault Fault
	// Code is the SOCKS5 REP (Reply) or HTTP status (Reply).
	Code int
	// Reason is the HTTP reason phrase for Reply; default
	// http.StatusText(Code).
	Reason string
	// Header holds extra HTTP response headers for Reply, e.g.
	// X-Squid-Error: ERR_CONNECT_FAIL 111.
	Header http.Header
	// Garbage replaces the default garbage answer.
	Garbage []byte
	// Preamble is written in the same write as the success reply, as if the
	// target had spoken first (exercises over-read handling).
	Preamble []byte
	// FirstByteDelay holds the first target→client byte this long.
	FirstByteDelay time.Duration
	// StallAfter, when > 0, stops relaying target→client after this many
	// bytes (the conn stays open: a body stalled mid-way).
	StallAfter int64
}

// Options configure a fake upstream.
type Options struct {
	// Username and Password, when Username is set, are required from
	// clients (SOCKS5 RFC 1929 or Proxy-Authorization: Basic).
	Username, Password string
	// Mode is the initial behaviour.
	Mode Mode
	// TLS makes NewHTTPProxy serve over TLS (an https:// upstream) with a
	// fresh self-signed certificate for 127.0.0.1; see ClientTLS.
	TLS bool
	// Dial reaches targets; nil means a net.Dialer with a 5s timeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Server is a running fake upstream.
type Server struct {
	t      testing.TB
	scheme string
	opts   Options
	addr   string
	handle func(s *Server, c net.Conn, m *Mode)
	wrap   func(net.Conn) net.Conn // TLS, or nil

	serverTLS *tls.Config // set by NewHTTPProxy with Options.TLS

	mode atomic.Pointer[Mode]

	connections atomic.Int64
	tunnels     atomic.Int64
	forwards    atomic.Int64
	authFails   atomic.Int64

	ctx    context.Context // cancelled by Close: ends target dials and waits
	cancel context.CancelFunc
	done   <-chan struct{} // ctx.Done()
	wg     sync.WaitGroup

	// mu guards the fields below.
	mu     sync.Mutex
	ln     net.Listener // nil while refusing
	conns  map[net.Conn]struct{}
	closed bool
}

func newServer(t testing.TB, scheme string, opts Options, handle func(*Server, net.Conn, *Mode), serverTLS *tls.Config) *Server {
	t.Helper()
	s := &Server{t: t, scheme: scheme, opts: opts, handle: handle, conns: make(map[net.Conn]struct{}), serverTLS: serverTLS}
	if serverTLS != nil {
		s.wrap = func(c net.Conn) net.Conn { return tls.Server(c, serverTLS) }
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.done = s.ctx.Done()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("upstreamtest: listen: %v", err)
	}
	s.addr = ln.Addr().String()
	m := opts.Mode
	s.mode.Store(&m)
	if m.Fault == Refuse {
		ln.Close()
	} else {
		s.ln = ln
		s.wg.Add(1)
		go s.serve(ln)
	}
	t.Cleanup(s.Close)
	return s
}

// Addr is the fake's "127.0.0.1:port".
func (s *Server) Addr() string { return s.addr }

// URL is the upstream URL for rotor, with the credentials when set.
func (s *Server) URL() *url.URL {
	u := &url.URL{Scheme: s.scheme, Host: s.addr}
	if s.opts.Username != "" {
		u.User = url.UserPassword(s.opts.Username, s.opts.Password)
	}
	return u
}

// Connections counts accepted TCP connections.
func (s *Server) Connections() int64 { return s.connections.Load() }

// Tunnels counts successful tunnels (success reply sent).
func (s *Server) Tunnels() int64 { return s.tunnels.Load() }

// Forwards counts plain HTTP requests forwarded (HTTP proxy only).
func (s *Server) Forwards() int64 { return s.forwards.Load() }

// AuthFailures counts rejected credentials.
func (s *Server) AuthFailures() int64 { return s.authFails.Load() }

// Mode returns the current behaviour.
func (s *Server) Mode() Mode { return *s.mode.Load() }

// SetMode switches the behaviour for connections accepted from now on.
// Switching to Refuse closes the listener (open tunnels stay); switching
// away from it listens again on the same address.
func (s *Server) SetMode(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mode.Store(&m)
	if s.closed {
		return
	}
	switch {
	case m.Fault == Refuse && s.ln != nil:
		s.ln.Close()
		s.ln = nil
	case m.Fault != Refuse && s.ln == nil:
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			s.t.Errorf("upstreamtest: listen again on %s: %v", s.addr, err)
			return
		}
		s.ln = ln
		s.wg.Add(1)
		go s.serve(ln)
	}
}

// Close stops the fake: the listener and every open conn are closed and
// all its goroutines are waited for. It is idempotent and registered with
// t.Cleanup.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.cancel()
	if s.ln != nil {
		s.ln.Close()
		s.ln = nil
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// serve is the accept loop for one listener; it exits when the listener is
// closed (Refuse or Close).
func (s *Server) serve(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // net.ErrClosed after Refuse/Close; anything else ends the fake too
		}
		s.connections.Add(1)
		if !s.track(c) {
			c.Close()
			return
		}
		m := s.mode.Load()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			defer c.Close()
			// BlackHole and CloseAfterAccept act at the TCP level, before
			// any TLS handshake.
			if s.wrap != nil && m.Fault != BlackHole && m.Fault != CloseAfterAccept {
				c = s.wrap(c)
			}
			s.handle(s, c, m)
		}()
	}
}

// track registers c so Close can close it; false once closed.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// dialTarget reaches the target for an Accept tunnel; the conn is tracked
// so Close unblocks relays.
func (s *Server) dialTarget(addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(s.ctx, 5*time.Second)
	defer cancel()
	dial := s.opts.Dial
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if !s.track(c) {
		c.Close()
		return nil, net.ErrClosed
	}
	return c, nil
}

// drain reads and discards until the peer closes or the fake closes.
func drain(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

// relay copies both ways until both directions end, applying the Mode's
// data-phase faults to target→client. clientR may hold bytes already
// buffered from the client.
func (s *Server) relay(client net.Conn, clientR io.Reader, target net.Conn, m *Mode) {
	defer s.untrack(target)
	defer target.Close()
	upDone := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owner: relay; exits when the client side ends or Close closes the conns
		defer wg.Done()
		defer close(upDone)
		_, _ = io.Copy(target, clientR)
		closeWrite(target)
	}()
	s.copyDown(client, target, m, upDone)
	closeWrite(client)
	wg.Wait()
}

// copyDown relays target→client with FirstByteDelay and StallAfter.
func (s *Server) copyDown(client io.Writer, target io.Reader, m *Mode, upDone <-chan struct{}) {
	buf := make([]byte, 32<<10)
	var sent int64
	first := true
	for {
		n, err := target.Read(buf)
		if n > 0 {
			if first && m.FirstByteDelay > 0 {
				tm := time.NewTimer(m.FirstByteDelay)
				select {
				case <-tm.C:
				case <-s.done:
					tm.Stop()
					return
				}
			}
			first = false
			chunk := buf[:n]
			stall := m.StallAfter > 0 && sent+int64(n) >= m.StallAfter
			if stall {
				chunk = chunk[:m.StallAfter-sent]
			}
			if _, werr := client.Write(chunk); werr != nil {
				return
			}
			sent += int64(len(chunk))
			if stall {
				select { // hold the conn open, silent, until the client or the fake goes
				case <-upDone:
				case <-s.done:
				}
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func closeWrite(c any) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// ClosedPort returns "127.0.0.1:port" where nothing listens: connects to it
// are refused.
func ClosedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("upstreamtest: listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
