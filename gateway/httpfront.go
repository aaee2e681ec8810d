package gateway

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rotor-proxy/rotor/upstream"
)

// proxyHandler serves the HTTP front: CONNECT tunnels and absolute-URI
// http:// forwarding. Anything else is not a proxy request.
func (s *Server) proxyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer s.recoverConn("http", 0, nil)
		params, ok := s.proxyAuth(w, r)
		if !ok {
			return
		}
		switch {
		case r.Method == http.MethodConnect:
			s.serveConnect(w, r, params)
		case r.URL.IsAbs() && strings.EqualFold(r.URL.Scheme, "http"):
			s.serveForward(w, r, params)
		case r.URL.IsAbs():
			plainError(w, http.StatusBadRequest, "bad_request", "rotor forwards only http:// URLs; use CONNECT for https://")
		default:
			plainError(w, http.StatusBadRequest, "bad_request", "this is rotor's proxy port: send absolute-URI requests or CONNECT")
		}
	})
}

// proxyAuth checks Proxy-Authorization when clients are configured, and
// extracts username parameters either way. It answers 407 itself.
func (s *Server) proxyAuth(w http.ResponseWriter, r *http.Request) (userParams, bool) {
	auth := s.auth.Load()
	user, pass, have := parseProxyAuth(r.Header.Get("Proxy-Authorization"))
	params := parseUser(user)
	if !auth.required() {
		return params, true
	}
	if have && auth.check(params.User, pass) {
		return params, true
	}
	if have {
		// A wrong password (not none: a 407 to a request without
		// credentials is how a browser's challenge starts) may be answered
		// late; the request's context ends the wait when the client left.
		cfg := s.cfg.Load()
		s.authFailed("http", r.RemoteAddr, auth.loginUser(params.User), cfg.Listen.HandshakeTimeout-guardMargin, r.Context().Done())
	}
	w.Header().Set("Proxy-Authenticate", `Basic realm="rotor"`)
	// What did not parse, if anything; nothing of the users (see refusal).
	plainError(w, http.StatusProxyAuthRequired, "client_auth", auth.refusal(user, pass, params))
	// At debug, like the SOCKS5 front's failed logins: a client probing
	// credentials must not fill the log. The password is never logged.
	why := "no credentials"
	if have {
		why = "wrong credentials"
	}
	s.log.Debug().Str("listener", "http").Str("client", r.RemoteAddr).Str("user", auth.loginUser(params.User)).
		Str(errField, why).Msg("proxy authentication required")
	s.metrics.tunnelDone("http", "client_auth")
	return params, false
}

func parseProxyAuth(h string) (user, pass string, ok bool) {
	const prefix = "basic "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[len(prefix):]))
	if err != nil {
		return "", "", false
	}
	// Without the colon (RFC 7617 user-pass) there is no telling the user
	// from the password: neither is kept, so none can reach a log line.
	user, pass, ok = strings.Cut(string(raw), ":")
	if !ok {
		return "", "", false
	}
	return user, pass, ok
}

func plainError(w http.ResponseWriter, status int, rotorErr, reason string) {
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Rotor-Error", rotorErr)
	h.Set("Connection", "close")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(reason + "\n"))
}

// badTargetError is the log line's error for a target badTarget refused,
// saying why as the client was told.
func badTargetError(msg string) error { return fmt.Errorf("%w: %s", errBadTarget, msg) }

// logTarget is addr as a log line's target: as sent when it is printable
// ASCII, else quoted (a hostile client's control bytes stay visible).
func logTarget(addr string) string {
	for i := 0; i < len(addr); i++ {
		if c := addr[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' {
			return strconv.QuoteToASCII(addr)
		}
	}
	return addr
}

// badTarget says why addr, a host:port from a client (CONNECT authority
// or forwarded URL), names no target an upstream could reach, or returns
// "" when it can be tried: the host is not empty and the port is a
// decimal number from 1 to 65535, a TCP port one can connect to. It is
// checked before an upstream is picked, so the client gets a 400 and no
// upstream is blamed for a target that cannot exist. The host must be a
// DNS name or an IP literal (validTargetHost, as on the SOCKS5 front).
func badTarget(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return "want host:port"
	case host == "":
		return "the host is empty"
	case !validTargetHost(host):
		// Checked here, not left to the upstream: punctuation or raw
		// bytes in the CONNECT line or absolute URI rotor writes would
		// make a strict proxy answer 400, and cool a healthy upstream.
		return targetHostProblem(host)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		return "the port must be a number from 1 to 65535"
	}
	return ""
}

// serveConnect dials the target through the pool, answers 200 naming the
// upstream, hijacks the client connection and relays.
func (s *Server) serveConnect(w http.ResponseWriter, r *http.Request, params userParams) {
	start := time.Now()
	id := s.connID.Add(1)
	addr := r.Host
	// Refusals get the tunnel's line, as on the SOCKS5 front.
	// The request target must be the authority form, host:port alone
	// (RFC 9110 section 9.3.6): net/http's parser drops a userinfo or a
	// path, which would have tunnelled somewhere the client did not quite ask for.
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" || strings.ContainsAny(r.RequestURI, "/@?#") {
		plainError(w, http.StatusBadRequest, "bad_request", "CONNECT needs host:port")
		s.logTunnel(id, "http", nil, params.User, logTarget(addr), nil, badTargetError("want host:port"), relayResult{}, start, r.RemoteAddr)
		return
	}
	if s.selfTarget(addr) {
		plainError(w, http.StatusForbidden, "forbidden", errSelfTarget.Error())
		s.logTunnel(id, "http", nil, params.User, addr, nil, errSelfTarget, relayResult{}, start, r.RemoteAddr)
		return
	}
	if msg := badTarget(addr); msg != "" {
		plainError(w, http.StatusBadRequest, "bad_request", "invalid target "+strconv.Quote(addr)+": "+msg)
		s.logTunnel(id, "http", nil, params.User, logTarget(addr), nil, badTargetError(msg), relayResult{}, start, r.RemoteAddr)
		return
	}
	req := upstream.Request{Addr: addr, Tags: params.Tags, Session: params.Session, User: params.User}
	ctx, cancel := context.WithCancel(r.Context())
	lease, err := s.pool.Dial(ctx, req)
	cancel()
	if err != nil {
		cf := explain(err)
		plainError(w, cf.Status, cf.Header, cf.Reason)
		s.logTunnel(id, "http", nil, params.User, addr, nil, err, relayResult{}, start, r.RemoteAddr)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = lease.Conn.Close()
		lease.Done()
		plainError(w, http.StatusInternalServerError, "internal", "connection cannot be hijacked")
		return
	}
	c, rw, err := hj.Hijack()
	if err != nil {
		_ = lease.Conn.Close()
		lease.Done()
		return
	}
	// After Hijack net/http no longer closes c, not even when this
	// handler panics: close it ourselves until the tunnel owns it.
	handedOff := false
	defer func() {
		if !handedOff {
			_ = c.Close()
		}
	}()
	_ = c.SetDeadline(time.Time{})
	var pending []byte
	if n := rw.Reader.Buffered(); n > 0 {
		pending, _ = rw.Reader.Peek(n)
		pending = append([]byte(nil), pending...)
	}
	resp := "HTTP/1.1 200 Connection established\r\nX-Rotor-Upstream: " + lease.Endpoint.Name + "\r\n\r\n"
	if _, err := c.Write([]byte(resp)); err != nil {
		_ = c.Close()
		_ = lease.Conn.Close()
		lease.Done()
		s.releaseHijacked(c)
		return
	}
	handedOff = true
	s.runTunnel(id, "http", c, lease, pending, addr, params.User, start, func() { s.releaseHijacked(c) })
}

// releaseHijacked releases the limit slot of a hijacked connection.
func (s *Server) releaseHijacked(c net.Conn) {
	if c == nil {
		return
	}
	if v, ok := s.hijackRelease.LoadAndDelete(c); ok {
		v.(func())()
	}
}
