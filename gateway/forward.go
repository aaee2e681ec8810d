package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// hopHeaders are removed in both directions (RFC 9110 section 7.6.1), plus
// the proxy credentials rotor consumes.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// serveForward forwards one absolute-URI http:// request. Each request on a
// kept-alive client connection is a new pick from the pool; upstream
// connections are pooled per endpoint.
func (s *Server) serveForward(w http.ResponseWriter, r *http.Request, params userParams) {
	start := time.Now()
	id := s.connID.Add(1)
	cfg := s.cfg.Load()
	pcfg := s.pool.Config()
	if !stripFragment(r) {
		plainError(w, http.StatusBadRequest, "bad_request", "malformed request target")
		return
	}
	addr := forwardAddr(r.URL)
	if s.selfTarget(addr) {
		plainError(w, http.StatusForbidden, "forbidden", errSelfTarget.Error())
		s.logForward(id, r, params.User, nil, nil, errSelfTarget, 0, start)
		return
	}
	// A target no upstream could reach is the client's error, told
	// before any upstream is picked (and blamed for it).
	if msg := badTarget(addr); msg != "" {
		plainError(w, http.StatusBadRequest, "bad_request", "invalid target "+strconv.Quote(addr)+": "+msg)
		s.logForward(id, r, params.User, nil, nil, badTargetError(msg), 0, start)
		return
	}
	ctx := r.Context()
	iw, _ := w.(interimWriter)

	// Make the body replayable when it is small enough to buffer.
	var buffered []byte
	var big *countingBody
	if r.Body != nil && r.Body != http.NoBody {
		if r.ContentLength >= 0 && r.ContentLength <= pcfg.RetryBodyLimit {
			idle := bufferIdle(cfg.Listen.HandshakeTimeout)
			b, err := readSmallBody(w, r.Body, pcfg.RetryBodyLimit+1, idle)
			if err != nil {
				// The same answers and log line as a streamed body's
				// (a stall here is the handshake timeout's).
				ce := &clientBodyError{err: err}
				s.clientBodyAnswer(w, ce, idle)
				s.logForward(id, r, params.User, nil, nil, ce, 0, start)
				return
			}
			buffered = b
		} else {
			big = &countingBody{r: r.Body}
		}
	}
	// Replayable requests take the lean path (forward_client.go); the
	// others go through net/http's Transport with a cleaned copy.
	var x *fwdExchange
	var out *http.Request
	var target string // out's request target as the client sent it
	if leanForwardable(r, big != nil) {
		x = &fwdExchange{r: r, head: rawHead(w), addr: addr, body: buffered, firstByte: cfg.SlowBody.FirstByte, interim: iw}
	} else {
		out = r.Clone(interimTrace(ctx, iw)) // deep-copies the header too
		out.RequestURI = ""
		removeHop(out.Header)
		if _, ok := out.Header["User-Agent"]; !ok {
			// The Transport would add Go-http-client/1.1: a fingerprint
			// the client did not send. An empty value sends none.
			out.Header["User-Agent"] = []string{""}
		}
		out.Close = false
		// The client's trailer fields are not forwarded (a recipient that
		// removes the chunked coding may discard them, RFC 9112 section
		// 7.1.2): with out.Trailer set the Transport would still announce
		// them in a Trailer header, then send none (they land in
		// r.Trailer, not in the clone's copy).
		out.Trailer = nil
		target = originTarget(r)
	}
	setBody := func() {
		switch {
		case buffered != nil:
			out.Body = io.NopCloser(bytes.NewReader(buffered))
			out.ContentLength = int64(len(buffered))
			// With GetBody the Transport sends the request again on
			// another connection when a kept-alive one failed before any
			// byte of it was written (its nothingWrittenError), whatever
			// the method; without it, it gave up.
			out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buffered)), nil }
		case big != nil:
			out.Body, out.GetBody = big, nil
		default:
			out.Body, out.GetBody = nil, nil
		}
	}

	req := upstream.Request{Addr: addr, Tags: params.Tags, Session: params.Session, User: params.User}
	att := s.pool.NewAttempts(req)
	if idempotent(r.Method) && big == nil {
		att.Replayable() // a slow answer gets a second opinion (see Attempts.Replayable)
	}
	host := req.Host()
	// last is a response held back for retry_statuses: it is what the
	// client gets when no other upstream does better.
	var last *http.Response
	var lastEP *upstream.Endpoint
	// reported, lastReported: the failure a relayed answer (resp, last)
	// was reported with (a target_http_error status), for its line.
	var reported, lastReported *health.Failure
	// cur is the endpoint of the latest attempt (nil before the first):
	// a request that fails or whose client leaves after attempts names it
	// in its line (logForward prefers the upstream an attempts error
	// answers with, as a tunnel's line does).
	var cur *upstream.Endpoint
	fail := func(err error) {
		if last != nil {
			n, berr := s.relay(ctx, w, last, lastEP, strings.ToLower(addr), cfg.SlowBody.Stall, nil)
			att.Release(lastEP)
			s.logForward(id, r, params.User, lastEP, att, relayedFailure(berr, lastReported), n, start)
			return
		}
		cf := explain(err)
		var bad *badAnswerError
		var ce *upstream.ConnectStatusError
		var cu *closedUnansweredError
		switch {
		case errors.As(err, &cu):
			cf = clientFailure{Status: http.StatusBadGateway, Header: "upstream_closed; upstream=" + cu.upstream, Reason: cu.Error()}
		case errors.As(err, &bad):
			cf.Reason = bad.reason + " (behind upstream " + lastUpstream(err) + ")"
		case errors.As(err, &ce) && ce.Plain && !errors.Is(err, upstream.ErrRequestRejected) && !strings.Contains(cf.Header, "; kind="):
			// The last upstream's own answer: say what it was (squid's
			// 502 ERR_TOO_BIG, 503 ERR_SHUTTING_DOWN), which a class and
			// stage alone do not (a rejected request names it already, and
			// a target failure of a known kind says it in its reason).
			// Its text is bounded and scrubbed (PlainStatusError).
			cf.Reason += ": " + ce.Error()
		}
		plainError(w, cf.Status, cf.Header, cf.Reason)
		s.logForward(id, r, params.User, cur, att, err, 0, start)
	}
	// In flight from the first upstream picked: a request still waiting
	// for one is rotor_waiting_clients' and holds no upstream's active.
	inFlight := false
	defer func() {
		if inFlight {
			s.metrics.requestEnd()
		}
	}()
	for {
		e, err := att.Next(ctx)
		if err != nil {
			fail(err)
			return
		}
		if !inFlight {
			inFlight = true
			s.metrics.requestStart()
		}
		cur = e
		var resp *http.Response
		if x != nil {
			resp, err = s.fwdClient(e).roundTrip(ctx, x)
		} else {
			resp, err = s.roundTripTransport(e, cfg, out, func() {
				setBody()
				setRawTarget(out, target, e.AbsoluteForm())
			}, big)
		}
		if err == nil && resp.StatusCode < http.StatusOK {
			// rotor strips Upgrade from requests and both clients skip
			// interim answers: a 1xx that arrives as the final answer is
			// an unsolicited 101 (the Transport returns it), which the
			// client would wait on for ever.
			resp.Body.Close()
			resp, err = nil, errSwitchingProtocols
		}
		if err != nil && s.cutting.Load() {
			// The drain is cutting what is left: whatever broke the
			// exchange (its cancel, the client's read side shut under a
			// streamed body, the upstream connection torn down) is the
			// drain's, not the upstream's nor the target's.
			att.Neutral(e)
			if last != nil { // the held retry-status answer goes unsent
				last.Body.Close()
				att.Release(lastEP)
			}
			cf := explain(context.Canceled)
			plainError(w, cf.Status, cf.Header, cf.Reason)
			s.logForward(id, r, params.User, e, att, errDrainCut, 0, start)
			return
		}
		if err != nil {
			// The client's body failed while it was sent: that is the
			// client's, however the upstream exchange ended because of it.
			ce := big.failed()
			if ce == nil {
				errors.As(err, &ce)
			}
			if ce != nil {
				att.Neutral(e)
				s.clientBodyAnswer(w, ce, s.h1.bodyIdle)
				s.logForward(id, r, params.User, e, att, ce, 0, start)
				return
			}
			if errors.As(err, new(*closedUnansweredError)) {
				// Nobody's failure, and not sent again (see the type).
				att.Neutral(e)
				fail(err)
				return
			}
			err = directSlowIsTarget(e, classifyForwardErr(err, host))
		}
		if err == nil {
			if f := classifyProxyResponse(e, resp); f != nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				f.Target = host
				err = f
			}
		}
		if err != nil {
			sent := !beforeRequest(err)
			if stop := att.Failed(ctx, e, err); stop != nil {
				fail(stop)
				return
			}
			if (big != nil && big.n.Load() > 0) || (sent && !idempotent(r.Method)) {
				fail(&upstream.AttemptsError{Attempts: att.List()})
				return
			}
			continue
		}
		reported = nil
		retry := slices.Contains(pcfg.RetryStatuses, resp.StatusCode) && idempotent(r.Method) && big == nil
		if retry {
			att.HoldAnswer(e) // the session binds to it only if the client gets it
		}
		if slices.Contains(cfg.TargetHTTPError.Statuses, resp.StatusCode) {
			att.Answered(e)
			reported = &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: host,
				Err: errors.New("target answered " + e.PeerText(resp.Status))}
			s.pool.Report(e, reported)
		} else {
			att.Served(e)
		}
		if last != nil {
			last.Body.Close()
			att.Release(lastEP)
			last, lastEP, lastReported = nil, nil, nil
		}
		if retry {
			// Try another upstream; keep this answer in case none does better.
			last, lastEP, lastReported = resp, e, reported
			continue
		}
		n, berr := s.relay(ctx, w, resp, e, strings.ToLower(addr), cfg.SlowBody.Stall, big)
		att.Release(e)
		s.logForward(id, r, params.User, e, att, relayedFailure(berr, reported), n, start)
		return
	}
}

// interimWriter is a ResponseWriter that sends a target's informational
// (1xx) answers ahead of the final one (h1Writer.interim).
type interimWriter interface{ interim(code int, h http.Header) }

// interimTrace returns ctx with a ClientTrace that relays the target's
// informational answers to iw as the Transport reads past them (ctx as it
// is for a nil iw). The lean client relays them itself (fwdExchange).
// Given the hook, the Transport stops counting interim heads against
// MaxResponseHeaderBytes (it leaves that to whoever reads them): they are
// bounded here as the lean client bounds them, all of them within
// fwdMaxResponseHead, so a target sending endless 102s gets a 502.
func interimTrace(ctx context.Context, iw interimWriter) context.Context {
	if iw == nil {
		return ctx
	}
	bound := interimBound()
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			if err := bound(code, h); err != nil {
				return err
			}
			iw.interim(code, http.Header(h))
			return nil // a client gone shows at the final answer's writes
		},
	})
}

// interimBound returns a Got1xxResponse hook that bounds the interim
// heads of one round trip, all of them within fwdMaxResponseHead: with
// any such hook the Transport stops counting them itself.
func interimBound() func(int, textproto.MIMEHeader) error {
	size := 0 // the interim heads' bytes so far, near enough
	return func(_ int, h textproto.MIMEHeader) error {
		size += len("HTTP/1.1 102 Processing\r\n\r\n")
		for k, vv := range h {
			for _, v := range vv {
				size += len(k) + len(": \r\n") + len(v)
			}
		}
		if size > fwdMaxResponseHead {
			return errRespHeadTooLarge
		}
		return nil
	}
}

// stripFragment removes a fragment from r's target: it is the client's
// own and not sent (RFC 9110 section 4.2.5; RFC 9112 section 3.2 has
// none in a request target). http.ReadRequest keeps it in the path or
// query, which would send it on as "%23frag". It reports false when the
// target without its fragment no longer parses or names another host.
func stripFragment(r *http.Request) bool {
	i := strings.IndexByte(r.RequestURI, '#')
	if i < 0 {
		return true
	}
	u, err := url.ParseRequestURI(escapeStray(r.RequestURI[:i]))
	if err != nil || u.Host != r.URL.Host || !u.IsAbs() {
		return false
	}
	r.URL = u
	return true
}

// forwardAddr is the host:port a forwarded request goes to: port 80 when
// the URL has none or an empty one (RFC 3986 section 3.2.3).
func forwardAddr(u *url.URL) string {
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Hostname(), ""
	}
	if port == "" {
		port = "80"
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), port)
}

// forwardTarget is the host:port of r's target for its log line (port 80
// when the URL has none, as forwardAddr goes to), or the URL's host as it
// is when it has none (a refused request).
func forwardTarget(r *http.Request) string {
	if r.URL == nil || r.URL.Host == "" {
		return ""
	}
	return forwardAddr(r.URL)
}

// relayedFailureError is a forwarded answer that was relayed to the client
// whole while its upstream was reported for it (a target_http_error
// status: cooled for the host): the request's line says so, with the
// failure's class as its outcome, instead of ok.
type relayedFailureError struct{ f *health.Failure }

func (e *relayedFailureError) Error() string {
	return "the answer was relayed, and its upstream reported: " + e.f.Error()
}
func (e *relayedFailureError) Unwrap() error { return e.f }

// relayedFailure returns berr, relay's error, or for an answer relayed
// whole (berr nil) whose upstream was reported with f, f as a
// *relayedFailureError.
func relayedFailure(berr error, f *health.Failure) error {
	if berr != nil || f == nil {
		return berr
	}
	return &relayedFailureError{f: f}
}

// relay writes resp to the client through writeResponse. When the body
// ends before its end (the upstream's error, or silent for stall, which
// is reported as slow_body) the client's answer is aborted, so the cut
// shows; the error is returned for the request's log line. A client that
// went away before the whole answer reached it (a write to it failed, or
// it reset its connection, which cancels ctx and ends the upstream read)
// is a *clientGoneError, reported to nobody; the upstream connection is
// then closed with the rest of the body unread (writeResponse closes the
// body early), never pooled. reqBody is the client's streamed request
// body (nil when none): while it is still being sent the stall clock does
// not run (the target may wait for the rest of it), and when reading it
// failed the answer ends because of the client, which is what is logged
// and nothing is reported. An answer the drain cut looks like one whose
// client went away here: drainCut logs it as the drain's.
func (s *Server) relay(ctx context.Context, w http.ResponseWriter, resp *http.Response, e *upstream.Endpoint, target string, stall time.Duration, reqBody *countingBody) (int64, error) {
	n, stalled, err := s.writeResponse(w, resp, e, stall, reqBody.sending)
	if err == nil {
		return n, nil
	}
	if ce := reqBody.failed(); ce != nil {
		abortAnswer(w)
		return n, ce
	}
	if errors.As(err, new(*clientGoneError)) {
		return n, err // nobody left to show the cut to
	}
	switch {
	case stalled:
		f := &health.Failure{Class: health.SlowBody, Stage: health.StageBody, Target: target,
			Err: errors.New("response body stalled for slow_body.stall")}
		directSlowIsTarget(e, f)
		s.pool.Report(e, f)
		err = f
	case ctx.Err() != nil:
		err = &clientGoneError{err: ctx.Err()}
	default:
		err = &bodyError{err: err}
	}
	abortAnswer(w)
	return n, err
}

// clientGoneError is a forwarded answer whose client went away before
// the whole of it reached it: outcome client_gone (errOutcome), the
// client's doing and not the upstream's.
type clientGoneError struct{ err error }

func (e *clientGoneError) Error() string {
	return "the client went away before the whole answer reached it: " + e.err.Error()
}
func (e *clientGoneError) Unwrap() error { return e.err }

// bodyError is an upstream body that ended before its end.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "response body ended early: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// abortAnswer ends the client's answer without ending its body (see
// h1Writer.abort). A ResponseWriter of net/http's is aborted its own way.
func abortAnswer(w http.ResponseWriter) {
	if a, ok := w.(interface{ abort() }); ok {
		a.abort()
		return
	}
	panic(http.ErrAbortHandler)
}

// writeResponse relays resp to the client, naming the upstream. Its head
// goes out before the body when the body's first bytes are not at hand
// (bodyReady), with them in one write when they are. A body
// that goes silent for stall is cut off (stalled), except while hold
// reports true (the client is still sending its request body): then the
// stall clock starts again. err is why the body ended before its end:
// the upstream's read error (a chunked or sized body cut short reads
// io.ErrUnexpectedEOF) or the stall, or a *clientGoneError when a write
// to the client failed (the body is then closed unread: its upstream
// connection is not reused). It is nil at the body's end.
func (s *Server) writeResponse(w http.ResponseWriter, resp *http.Response, e *upstream.Endpoint, stall time.Duration, hold func() bool) (total int64, stalled bool, err error) {
	defer resp.Body.Close()
	h := w.Header()
	for k, v := range resp.Header {
		if !rotorHeader(k) {
			h[k] = v
		}
	}
	removeHop(h)
	hideUpstreamToken(h, e)
	h.Set("X-Rotor-Upstream", e.Name)
	w.WriteHeader(resp.StatusCode)
	var cut, done, writing atomic.Bool
	var timer *time.Timer
	if stall > 0 {
		// Armed by the Reset below, once timer is set. The callback
		// re-arms it itself while hold() is true or a write to the
		// client is blocked (a lagging client holds the upstream back;
		// that is no silence of the upstream's), until done: a re-arm
		// racing the Stop fires once more and does nothing.
		timer = time.AfterFunc(time.Hour, func() {
			switch {
			case done.Load():
			case hold(), writing.Load():
				timer.Reset(stall)
			default:
				cut.Store(true)
				resp.Body.Close()
			}
		})
		timer.Reset(stall)
		defer func() {
			done.Store(true)
			timer.Stop()
		}()
	}
	// A failed flush is the client gone as a failed write is: the last
	// one before the end would otherwise leave the request logged ok.
	flush, flushEnd := func() error { return nil }, func() error { return nil }
	switch f := w.(type) {
	case *h1Writer:
		flush, flushEnd = f.FlushError, f.flushCommitted
	case http.Flusher:
		flush = func() error { f.Flush(); return nil }
	}
	if !bodyReady(resp) {
		// The first body read would wait for the upstream: the head goes
		// now, not with the first body bytes (see bodyReady). A lagging
		// client holds it back as a body write would (the stall timer).
		writing.Store(true)
		werr := flush()
		writing.Store(false)
		if werr != nil {
			return 0, false, &clientGoneError{err: werr}
		}
	}
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	for {
		n, rerr := resp.Body.Read(*bp)
		if timer != nil {
			timer.Reset(stall)
		}
		if n > 0 {
			writing.Store(true)
			_, werr := w.Write((*bp)[:n])
			// Flush when the upstream paused (a short read that is not the
			// end), so streamed responses reach the client as they come;
			// a body that arrives in one go is written once.
			if werr == nil && rerr == nil && n < len(*bp) {
				werr = flush()
			}
			writing.Store(false)
			if timer != nil {
				timer.Reset(stall) // the upstream's silence counts from here
			}
			if werr != nil {
				return total, false, &clientGoneError{err: werr}
			}
			total += int64(n)
		}
		switch {
		case rerr == io.EOF:
			// Delivered, not only buffered, before the line says ok.
			writing.Store(true)
			if werr := flushEnd(); werr != nil {
				return total, false, &clientGoneError{err: werr}
			}
			return total, false, nil
		case rerr != nil:
			return total, cut.Load(), rerr
		}
	}
}

// hideUpstreamToken hides, in the answer's header values, the Basic token
// of e's credentials: an upstream proxy that echoes rotor's
// Proxy-Authorization would hand rotor's upstream password to the client.
// The token (base64 of user:password, padded or not) matches nothing else;
// bodies are relayed as they are.
func hideUpstreamToken(h http.Header, e *upstream.Endpoint) {
	if e.URL == nil || e.URL.User == nil {
		return
	}
	pw, ok := e.URL.User.Password()
	if !ok || pw == "" {
		return
	}
	token := strings.TrimRight(base64.StdEncoding.EncodeToString([]byte(e.URL.User.Username()+":"+pw)), "=")
	hide := strings.NewReplacer(token+"==", redacted, token+"=", redacted, token, redacted)
	for _, vs := range h {
		for i, v := range vs {
			if strings.Contains(v, token) {
				vs[i] = hide.Replace(v) // vs is the header's own slice
			}
		}
	}
}

// rotorHeader reports whether field name k is in rotor's X-Rotor-
// namespace (any case: a name net/http did not canonicalise stays as
// sent). Such fields in a target's or an upstream's answer are not
// relayed: a site must not make a scraper believe rotor failed
// (X-Rotor-Error) or name the upstream that served it (X-Rotor-Upstream).
func rotorHeader(k string) bool {
	const prefix = "X-Rotor-"
	return len(k) >= len(prefix) && strings.EqualFold(k[:len(prefix)], prefix)
}

// classifyProxyResponse recognises answers that come from an http or https
// upstream proxy itself rather than from the target (../shared/UPSTREAM-SIGNALS.md):
// a 407 the proxy marks as its own (own407; tinyproxy's 401) means the
// proxy rejected rotor's credentials, one relayed by a proxy that marks
// its own is the target's, and one with no mark either way may be either
// (unmarked407Error); squid marks its own errors with X-Squid-Error, on
// error statuses only (a 2xx or 3xx carrying it is the target's: a site
// can send any header, and squid's deny_info redirect is an answer to
// relay); tinyproxy answers an unreachable target with "500 Unable to
// connect". Responses from the target return nil.
func classifyProxyResponse(e *upstream.Endpoint, resp *http.Response) *health.Failure {
	if !e.AbsoluteForm() {
		return nil
	}
	server := strings.ToLower(resp.Header.Get("Server"))
	squid := resp.Header.Get("X-Squid-Error")
	relayed := relayedBy(resp.Header)
	fail := func(c health.Class, st health.Stage) *health.Failure {
		// Plain: the proxy answered the forwarded request, not a CONNECT
		// (the history detail and the client's 502 say so). Every field
		// read here can come from the target, relayed unchanged (a site's
		// own 407, a forged X-Squid-Error), so a failure the proxy seems
		// to claim cools the upstream for that host only; the
		// target-failure rule cools it whole when it happens at hosts
		// other upstreams reach. Any website could otherwise take every
		// http upstream out of the pool, one answer each.
		f := &health.Failure{Class: c, Stage: st, Err: e.PlainStatusError(resp.StatusCode, resp.Status, squid)}
		if !c.IsTargetFailure() {
			f.Scope = health.ScopeTarget
		}
		return f
	}
	switch {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		switch own407(resp.Header, relayed) {
		case markedTarget:
			return nil // the target's own 407, relayed: the client's to see
		case markedProxy:
			return fail(health.AuthRejected, health.StageProxyAuth)
		}
		f := fail(health.AuthRejected, health.StageProxyAuth)
		f.Err = &unmarked407Error{err: f.Err}
		return f
	case resp.StatusCode == http.StatusUnauthorized && strings.HasPrefix(server, "tinyproxy") && relayed != "tinyproxy":
		return fail(health.AuthRejected, health.StageProxyAuth)
	case squid != "" && resp.StatusCode >= http.StatusBadRequest:
		switch {
		case strings.HasPrefix(squid, "ERR_CONNECT_FAIL 110"), strings.HasPrefix(squid, "ERR_READ_TIMEOUT"):
			return fail(health.TargetTimeout, health.StageTargetConnect)
		case strings.HasPrefix(squid, "ERR_CONNECT_FAIL"), strings.HasPrefix(squid, "ERR_DNS_FAIL"), strings.HasPrefix(squid, "ERR_ZERO_SIZE_OBJECT"),
			strings.HasPrefix(squid, "ERR_READ_ERROR"): // the target reset or closed mid-answer
			return fail(health.TargetUnreachable, health.StageTargetConnect)
		case strings.HasPrefix(squid, "ERR_CACHE_ACCESS_DENIED"):
			return fail(health.AuthRejected, health.StageProxyAuth)
		default:
			return fail(health.UpstreamError, health.StageHTTPStatus)
		}
	case resp.StatusCode == http.StatusInternalServerError && strings.HasPrefix(server, "tinyproxy") && strings.Contains(resp.Status, "Unable to connect"):
		return fail(health.TargetUnreachable, health.StageTargetConnect)
	}
	return nil
}
