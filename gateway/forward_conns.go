package gateway

// The upstream connections of plain-HTTP forwarding: each endpoint's
// net/http Transport and lean client (forward_client.go), kept in
// Server.transports, pruned on reload, and held within the endpoint's
// max_conns.

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/rotor-proxy/rotor/upstream"
)

// transport returns the pooled HTTP transport of e. http:// and https://
// upstreams get requests in absolute form (many proxies refuse CONNECT to
// port 80);
// the others carry them through a tunnel from e's dialer.
func (s *Server) transport(e *upstream.Endpoint, cfg *Config) http.RoundTripper {
	return s.transportOf(e, cfg, false)
}

// freshTransport is e's Transport for requests whose body cannot be
// replayed (streamed: pool.retry_body_limit): each goes on a new
// connection, closed after it. On a kept-alive one the upstream may end
// the connection while the body is being sent (an idle timeout meeting
// the request, or squid 5.7 ending a kept-alive client connection in the
// middle of the next large POST, 1 to 2 in 25), and such a request
// cannot go again: squid itself sends a request it could not retry only
// on a new server connection (FwdState::checkRetriable).
func (s *Server) freshTransport(e *upstream.Endpoint, cfg *Config) http.RoundTripper {
	return s.transportOf(e, cfg, true)
}

// transportOf is transport, or with fresh freshTransport.
func (s *Server) transportOf(e *upstream.Endpoint, cfg *Config, fresh bool) http.RoundTripper {
	key := trKey{transportKey(e), cfg.SlowBody.FirstByte, s.pool.Config().ConnectTimeout, fresh}
	if t, ok := s.transports.Load(key); ok {
		return t.(http.RoundTripper)
	}
	t := &http.Transport{
		Proxy:                  nil,
		MaxIdleConnsPerHost:    32,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: fwdMaxResponseHead,
		ResponseHeaderTimeout:  cfg.SlowBody.FirstByte,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := e.DialContext(ctx, network, addr)
			return letEarlyAnswers(c), err // an early answer is relayed (answeredConn)
		},
		// max_conns counts every open connection to the upstream: the
		// Transport's idle ones would be uncounted, and its pool cannot
		// be bounded per endpoint, so it keeps none (the lean client,
		// which serves the replayable requests, keeps them within the
		// limit).
		DisableKeepAlives: e.MaxConns > 0 || fresh,
	}
	if cfg.SlowBody.FirstByte < 0 {
		t.ResponseHeaderTimeout = 0
	}
	if e.AbsoluteForm() {
		proxyURL := *e.URL
		// The Transport speaks to it as to an http:// proxy (absolute
		// form, Proxy-Authorization from the userinfo); TLS to an
		// https:// one is the dial's, so the Transport never does its
		// own (with none of upstream_ca_file's roots).
		proxyURL.Scheme = "http"
		// One proxy connection per target, as the lean client keeps them
		// (fwdClient.roundTrip: tinyproxy relays a connection's later
		// requests to its first target): the Transport pools connections
		// by the proxy URL, so each target gets its own, told apart by a
		// fragment that is never sent (the dial below goes to the proxy's
		// host, Proxy-Authorization comes from its userinfo).
		t.Proxy = func(r *http.Request) (*url.URL, error) {
			u := proxyURL
			u.Fragment = r.URL.Host
			return &u, nil
		}
		t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			// Through the endpoint's dialer: the proxy's name cache (a
			// name is resolved once a minute, as for tunnels), TLS to an
			// https:// proxy, errors with their class and stage.
			c, _, _, err := e.DialForward(ctx)
			return guardNotHTTP(letEarlyAnswers(c)), err // an answer that is not HTTP is the upstream's (notHTTPConn); an early one is relayed (answeredConn)
		}
	}
	if e.MaxConns > 0 {
		dial := t.DialContext
		t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			s.connRoom(e)
			return dial(ctx, network, addr)
		}
	}
	actual, _ := s.transports.LoadOrStore(key, t)
	return actual.(http.RoundTripper)
}

// idleRoom is how many idle forward connections to e may stay open when
// one more connection to it opens, for an e with max_conns: the provider
// counts every open connection, and the pool's limit counts only those
// in use (e.Active: tunnels and forwarded requests in flight, the one
// about to dial included, each holding at most one connection). It uses
// this instance's share of the limit in fleet mode, ceil(max_conns/N) and
// at least 1, as the pool does (upstream connShare).
func (s *Server) idleRoom(e *upstream.Endpoint) int {
	limit := int64(e.MaxConns)
	if n := int64(s.pool.Instances()); n > 1 {
		limit = max((limit+n-1)/n, 1)
	}
	return int(limit - e.Active())
}

// connRoom makes room for a new connection to e when e has a max_conns:
// it closes idle connections of e's lean client, the longest idle first,
// so that open connections (in use and idle) stay within the limit.
func (s *Server) connRoom(e *upstream.Endpoint) {
	if e.MaxConns <= 0 {
		return
	}
	if c, ok := s.transports.Load(fwdKey{transportKey(e)}); ok {
		c.(*fwdClient).trimIdle(s.idleRoom(e))
	}
}

// trKey is the s.transports key of an endpoint's Transport: the timeouts
// it was built with are part of it, so a reload that changes
// slow_body.first_byte or pool.connect_timeout builds a new one (the old
// one is pruned, its requests in flight finish on it).
type trKey struct {
	u                  *url.URL
	firstByte, connect time.Duration
	fresh              bool // freshTransport's: a new connection for each request
}

// fwdKey is the s.transports key of an endpoint's fwdClient.
type fwdKey struct{ u *url.URL }

// fwdClient returns the lean forward client of e (forward_client.go),
// kept next to its Transport and pruned with it. Shutdown closes its idle
// connections: they hold no goroutine, only a socket each.
func (s *Server) fwdClient(e *upstream.Endpoint) *fwdClient {
	key := fwdKey{transportKey(e)}
	if c, ok := s.transports.Load(key); ok {
		return c.(*fwdClient)
	}
	c := newFwdClient(e)
	if e.MaxConns > 0 {
		c.room = func() { c.trimIdle(s.idleRoom(e)) }
	}
	if e.Scheme() == "direct" {
		// The destination policy is the config's in force at each use,
		// not only at the dial: a reload to allow_private_destinations =
		// false must not leave kept-alive connections to private
		// targets in use.
		c.reusable = func(conn net.Conn) bool {
			ta, ok := conn.RemoteAddr().(*net.TCPAddr)
			return !ok || s.forbidDestination(ta.AddrPort()) == nil
		}
	}
	actual, loaded := s.transports.LoadOrStore(key, c)
	if !loaded {
		context.AfterFunc(s.ctx, c.close)
	}
	return actual.(*fwdClient)
}

// transportKey identifies an endpoint's transport: its parsed URL, which a
// reload replaces (so a changed password gets a new transport and the old
// one is pruned). Comparing pointers keeps the per-request lookup free.
func transportKey(e *upstream.Endpoint) *url.URL { return e.URL }

// closeIdleForward closes every idle forward connection (a reload
// tightened the destination policy: net/http's Transport reuses its idle
// connections without asking the dialer again).
func (s *Server) closeIdleForward() {
	s.transports.Range(func(k, v any) bool {
		switch v := v.(type) {
		case *http.Transport:
			v.CloseIdleConnections()
		case *fwdClient:
			v.trimIdle(0)
		}
		return true
	})
}

// pruneTransports drops the transports and lean clients of endpoints no
// longer in the pool, and transports built with other timeouts than cfg's
// (the pool's config is cfg's already), and closes their idle connections.
func (s *Server) pruneTransports(cfg *Config) {
	live := map[*url.URL]bool{}
	for _, e := range s.pool.Endpoints() {
		live[transportKey(e)] = true
	}
	connect := s.pool.Config().ConnectTimeout
	s.transports.Range(func(k, v any) bool {
		switch k := k.(type) {
		case trKey:
			if !live[k.u] || k.firstByte != cfg.SlowBody.FirstByte || k.connect != connect {
				s.transports.Delete(k)
				v.(*http.Transport).CloseIdleConnections()
			}
		case fwdKey:
			if !live[k.u] {
				s.transports.Delete(k)
				v.(*fwdClient).close()
			}
		}
		return true
	})
}
