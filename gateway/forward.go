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
	"runtime"
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

// countingBody is a streamed request body on its way to an upstream (the
// Transport reads it, on its own goroutine). It lets rotor know whether
// any byte was consumed, so a request that never left can still be
// retried, and it marks at the source every error reading the client's
// body (a *clientBodyError): those are the client's, whatever the
// Transport then wraps them in or does to the upstream connection.
type countingBody struct {
	r   io.Reader
	n   atomic.Int64
	eof atomic.Bool                     // the body was read to its end
	err atomic.Pointer[clientBodyError] // the first read error
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	switch {
	case err == io.EOF:
		b.eof.Store(true)
	case err != nil:
		ce := &clientBodyError{err: err}
		if !b.err.CompareAndSwap(nil, ce) {
			ce = b.err.Load()
		}
		return n, ce
	}
	return n, err
}

func (b *countingBody) Close() error { return nil }

// failed returns the error that ended reading the client's body, or nil
// (also for a nil b: no streamed body).
func (b *countingBody) failed() *clientBodyError {
	if b == nil {
		return nil
	}
	return b.err.Load()
}

// sending reports whether the client is still sending the body: not
// read to its end and not failed. A nil b has nothing to send.
func (b *countingBody) sending() bool {
	return b != nil && !b.eof.Load() && b.err.Load() == nil
}

// clientBodyError is an error reading the client's request body while it
// was forwarded: a malformed chunked framing, a body that stalled for the
// body idle limit, or one that ended before its end (the client went
// away). It is the client's doing: never reported to an upstream's
// health, no other upstream is tried, and the client is told its own
// fault (clientBodyAnswer).
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string {
	return "reading the client's request body: " + e.err.Error()
}
func (e *clientBodyError) Unwrap() error { return e.err }

// clientBodyFault is what went wrong with a client's body.
type clientBodyFault int

const (
	bodyMalformed clientBodyFault = iota // framing the parser refused (chunk-size line "zz")
	bodyStalled                          // no byte within the body idle limit
	bodyGone                             // ended early or the connection failed: the client left
)

// fault sorts e's cause: a timeout is the body idle limit (headLimit); an
// early end (io.ErrUnexpectedEOF from net/http's body reader) or a
// connection error is a client that went away; anything else net/http's
// body reader made up itself, so the framing was bad.
func (e *clientBodyError) fault() clientBodyFault {
	var ne net.Error
	switch {
	case errors.As(e.err, &ne) && ne.Timeout():
		return bodyStalled
	case errors.Is(e.err, io.ErrUnexpectedEOF), errors.Is(e.err, io.EOF), errors.Is(e.err, net.ErrClosed),
		errors.As(e.err, new(*net.OpError)), errors.As(e.err, new(syscall.Errno)):
		return bodyGone
	}
	return bodyMalformed
}

// clientBodyAnswer tells the client that its request body failed, when
// no answer has begun: 400 for a malformed or truncated body, 408 for one
// that stalled (RFC 9110 section 15.5.9). To a client that left it goes
// nowhere, harmlessly; one that only half-closed reads it. A body the
// drain cut (its read side shut, h1Front.cut) is no fault of the client's:
// it is told 503 canceled, as a client still waiting for an upstream is.
func (s *Server) clientBodyAnswer(w http.ResponseWriter, e *clientBodyError, idle time.Duration) {
	if errors.Is(s.drainCut(e), errDrainCut) {
		cf := explain(context.Canceled)
		plainError(w, cf.Status, cf.Header, cf.Reason)
		return
	}
	switch e.fault() {
	case bodyStalled:
		if errors.As(e.err, new(*bodyTooSlowError)) {
			plainError(w, http.StatusRequestTimeout, "bad_request", "request body stalled: not all there within "+smallBodyWithin.String())
			return
		}
		plainError(w, http.StatusRequestTimeout, "bad_request", "request body stalled: no bytes for "+idle.String())
	case bodyGone:
		plainError(w, http.StatusBadRequest, "bad_request", "the request body ended before its end")
	default:
		plainError(w, http.StatusBadRequest, "bad_request", "malformed request body: "+e.err.Error())
	}
}

// smallBodyWithin bounds the whole read of a small request body that
// rotor buffers (readSmallBody), however steadily its bytes come: 64 KiB
// (pool.retry_body_limit's default) at a byte per second would otherwise
// hold a connection and a goroutine for 18 hours.
const smallBodyWithin = 2 * time.Minute

// bufferIdle is the longest silence allowed between the bytes of a small
// body that is buffered: listen.handshake_timeout, or h1BodyIdle when that
// is off.
func bufferIdle(handshake time.Duration) time.Duration {
	if handshake <= 0 {
		return h1BodyIdle
	}
	return handshake
}

// readSmallBody reads body (up to limit bytes) for a request whose body is
// small enough to buffer. Buffering it is still receiving the request: it
// is bounded like the head, or a client that stalls its body would hold a
// goroutine and a connection for as long as it likes. The bound is on the
// silence between its bytes (idle: a client still sending is not cut,
// however slow its link), and on the whole read (smallBodyWithin). A
// stall is a timeout error (clientBodyError.fault: bodyStalled);
// overrun, the whole-read bound, is an *bodyTooSlowError.
func readSmallBody(w http.ResponseWriter, body io.Reader, limit int64, idle time.Duration) ([]byte, error) {
	rc := http.NewResponseController(w)
	end := time.Now().Add(smallBodyWithin)
	var buf bytes.Buffer
	lr := io.LimitReader(body, limit)
	p := make([]byte, 4096)
	for {
		now := time.Now()
		deadline := now.Add(idle)
		if deadline.After(end) {
			deadline = end
		}
		_ = rc.SetReadDeadline(deadline)
		n, err := lr.Read(p)
		buf.Write(p[:n])
		switch {
		case err == io.EOF:
			_ = rc.SetReadDeadline(time.Time{}) // on error it stays: net/http drains the rest of the body after the 400
			return buf.Bytes(), nil
		case err != nil && !deadline.Before(end) && !time.Now().Before(end):
			return nil, &bodyTooSlowError{err: err}
		case err != nil:
			return nil, err
		}
	}
}

// bodyTooSlowError is a small body that kept coming but was not all there
// within smallBodyWithin: a timeout, told as such (clientBodyAnswer).
type bodyTooSlowError struct{ err error }

func (e *bodyTooSlowError) Error() string {
	return "request body not all there within " + smallBodyWithin.String() + ": " + e.err.Error()
}
func (e *bodyTooSlowError) Unwrap() error { return e.err }

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
	for {
		e, err := att.Next(ctx)
		if err != nil {
			fail(err)
			return
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
		if slices.Contains(cfg.TargetHTTPError.Statuses, resp.StatusCode) {
			att.Answered(e)
			reported = &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: host,
				Err: errors.New("target answered " + e.PeerText(resp.Status))}
			s.pool.Report(e, reported)
		} else {
			att.Succeeded(e)
		}
		if last != nil {
			last.Body.Close()
			att.Release(lastEP)
			last, lastEP, lastReported = nil, nil, nil
		}
		if slices.Contains(pcfg.RetryStatuses, resp.StatusCode) && idempotent(r.Method) && big == nil {
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

// fwdMaxResponseHead bounds the head of a target's answer (status line,
// header fields and any interim answers before it), on the lean client
// and the Transport alike. squid's reply_header_max_size is 64 KB; 1 MiB
// leaves room for sites with huge cookies while keeping a target that
// sends endless header lines from growing rotor's memory.
const fwdMaxResponseHead = 1 << 20

// badAnswerError is an answer of the target's that rotor does not relay.
// It is a target failure (a healthy upstream relayed it faithfully), and
// its reason is what the client's 502 says.
type badAnswerError struct{ reason string }

func (e *badAnswerError) Error() string { return e.reason }

var (
	errRespHeadTooLarge   = &badAnswerError{"the target's response header is larger than " + strconv.Itoa(fwdMaxResponseHead>>20) + " MiB"}
	errSwitchingProtocols = &badAnswerError{"the target answered 101 Switching Protocols to a request that asked for no protocol switch"}
)

// invalidAnswer is the badAnswerError of a target's answer that does not
// parse as HTTP (cause: net/http's parse error, which quotes what it
// refused, cut to a line's worth). It must not read as unreachable: the
// target was reached, and answered nonsense.
func invalidAnswer(cause error) *badAnswerError {
	// net/http quotes what it could not parse: a header line an upstream
	// echoed ("Proxy-Authorization Basic …") would reach the client's 502
	// and the log. PeerText hides credentials and bounds the text.
	return &badAnswerError{"the target sent an invalid HTTP response: " + upstream.PeerText(cause.Error())}
}

// parseError reports whether err, from http.ReadResponse on bytes that
// did arrive, is the parser refusing them rather than the connection
// failing (an early end, a timeout, a reset): net/http makes those up
// itself, with no type but textproto's.
func parseError(err error) bool {
	var ne net.Error
	return !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.As(err, &ne)
}

// transportHeadTooLarge is the end of the text of net/http's Transport
// error for a head over MaxResponseHeaderBytes (go1.26 transport.go,
// readLoop), sometimes wrapped in "transport connection broken".
var transportHeadTooLarge = "net/http: server response headers exceeded " + strconv.Itoa(fwdMaxResponseHead) + " bytes; aborted"

// transportInvalidAnswer are the beginnings of the texts of net/http's
// errors for an answer it cannot parse (go1.26 response.go ReadResponse;
// transfer.go fixLength, parseContentLength, parseTransferEncoding,
// fixTrailer), the innermost error of the Transport's chain. Header
// lines that do not parse are a textproto.ProtocolError, found by type.
var transportInvalidAnswer = []string{
	"malformed HTTP response",
	"malformed HTTP status code",
	"malformed HTTP version",
	"http: message cannot contain multiple Content-Length headers",
	"bad Content-Length",
	"invalid empty Content-Length",
	"unsupported transfer encoding",
	"too many transfer encodings",
	"bad trailer key",
}

// transportAnswerError maps the Transport's error for an answer rotor
// does not relay to a badAnswerError, so the client is told why (the lean
// client says so itself): errRespHeadTooLarge for an oversized head,
// invalidAnswer for one that does not parse. The Transport gives only
// text: like the x/net SOCKS adapter (STYLE rule 23) this is the one
// place that matches it, and TestForwardResponseHeadTooLarge and
// TestForwardInvalidResponse fail if a Go upgrade changes it. Other
// errors are returned as they are.
func transportAnswerError(err error) error {
	var bad *badAnswerError
	if errors.As(err, &bad) { // interimTrace's
		return bad
	}
	if strings.HasSuffix(err.Error(), transportHeadTooLarge) {
		return errRespHeadTooLarge
	}
	if errors.As(err, new(textproto.ProtocolError)) {
		return invalidAnswer(innermost(err))
	}
	root := innermost(err)
	for _, prefix := range transportInvalidAnswer {
		if strings.HasPrefix(root.Error(), prefix) {
			return invalidAnswer(root)
		}
	}
	return err
}

// innermost follows err's single-error Unwrap chain to its end.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// lastUpstream names the upstream of the last attempt in err, or "".
func lastUpstream(err error) string {
	var ae *upstream.AttemptsError
	if errors.As(err, &ae) {
		return ae.Last().Upstream
	}
	return ""
}

// directSlowIsTarget makes a slow_body failure of the direct upstream the
// target's: with no proxy in between a slow answer or a stalled body can
// only be the target's, so it must not cool direct for every host (with
// one direct upstream, one slow site would make the whole gateway answer
// 503). No answer within slow_body.first_byte is the target timing out
// (target_timeout at first_byte: a 504, as when two proxies in turn got
// nothing from it, not a 502 slow_body); a body that stalled once the
// answer began stays slow_body, scoped to the target host, as tunnels do
// (runTunnel). It returns err.
func directSlowIsTarget(e *upstream.Endpoint, err error) error {
	var f *health.Failure
	if errors.As(err, &f) && f.Class == health.SlowBody && e.Scheme() == "direct" {
		if f.Stage == health.StageFirstByte {
			f.Class = health.TargetTimeout
			return err
		}
		f.Scope = health.ScopeTarget
	}
	return err
}

// classifyForwardErr classifies a RoundTrip error. Errors from rotor's own
// dialers already carry class and stage (dial, proxy handshake, auth,
// target connect). Anything else happened after the request was written:
// no response headers within slow_body.first_byte is slow_body at
// first_byte; the connection ending before any response, and an answer
// rotor does not relay (badAnswerError: a head over fwdMaxResponseHead,
// one that does not parse, an unsolicited 101), are blamed on the target
// (a healthy proxy relays a target that hangs up or misbehaves as exactly
// that), so they do not cool the upstream on their own. Errors reading the
// client's body never get here (clientBodyError), nor a kept-alive
// connection that closed unanswered (closedUnansweredError).
func classifyForwardErr(err error, host string) error {
	var f *health.Failure
	if errors.As(err, &f) {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte, Target: host, Err: err}
	}
	if upstream.IsCanceled(err) {
		return err
	}
	return &health.Failure{Class: health.TargetUnreachable, Stage: health.StageFirstByte, Target: host, Err: transportAnswerError(err)}
}

// beforeRequest reports whether err happened before any byte of the request
// could have reached the target (dial or proxy handshake), which makes any
// request safe to retry.
func beforeRequest(err error) bool {
	var f *health.Failure
	if !errors.As(err, &f) {
		return false
	}
	switch f.Stage {
	case health.StageDial, health.StageProxyHandshake, health.StageProxyAuth, health.StageTargetConnect:
		return true
	}
	return false
}

// writeResponse relays resp to the client, naming the upstream. A body
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
// 407 (and tinyproxy's 401) mean the proxy rejected rotor's credentials;
// squid marks its own errors with X-Squid-Error, on error statuses only
// (a 2xx or 3xx carrying it is the target's: a site can send any header,
// and squid's deny_info redirect is an answer to relay); tinyproxy answers
// an unreachable target with "500 Unable to connect". Responses from the
// target return nil.
func classifyProxyResponse(e *upstream.Endpoint, resp *http.Response) *health.Failure {
	if !e.AbsoluteForm() {
		return nil
	}
	server := strings.ToLower(resp.Header.Get("Server"))
	squid := resp.Header.Get("X-Squid-Error")
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
		return fail(health.AuthRejected, health.StageProxyAuth)
	case resp.StatusCode == http.StatusUnauthorized && strings.HasPrefix(server, "tinyproxy"):
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

// answeredConn is a connection of a Transport's (forward_conns.go) that
// lets an early answer through: an upstream (or a target through it) may
// answer a request before its body is all sent, a 413 or a 401, and then
// reset the connection, as tinyproxy relays a target that does so. The
// Transport then has the answer and a failed write at once, and picks
// one at random: the failed write made a 502 target_unreachable of an
// answer that had come, and cooled the upstream for the host. Once bytes
// of an answer came, a write that fails because the peer reset or closed
// (ECONNRESET, EPIPE) is taken as written, and so is every later one (they
// go nowhere): the Transport returns the answer, or, when its head was
// not all there, the read's error.
type answeredConn struct {
	net.Conn
	// rmu is held by each Read (the Transport's reader goroutine): a
	// write that failed waits for a read under way, which on a reset
	// connection returns at once, to know what it brought.
	rmu      sync.Mutex
	answered atomic.Bool // a byte came from the peer
	broken   atomic.Bool // a write failed after that: later writes are dropped
	wfailed  atomic.Bool // a write failed (taken as written or not): the connection ended while a request was sent
}

// answeredOf returns the answeredConn under c, a connection a Transport
// dialled (httptrace's GotConnInfo.Conn), or nil.
func answeredOf(c net.Conn) *answeredConn {
	for range 3 {
		switch cc := c.(type) {
		case *answeredConn:
			return cc
		case *notHTTPConn:
			c = cc.Conn
		default:
			return nil
		}
	}
	return nil
}

// writeFailed reports whether a write on c failed: the connection ended
// (closed by the peer, reset, or torn down by the Transport after its
// reader met that end) while a request was being sent on it.
func (c *answeredConn) writeFailed() bool { return c != nil && c.wfailed.Load() }

// letEarlyAnswers wraps c, a new connection of a Transport's, in an
// answeredConn (nil stays nil).
func letEarlyAnswers(c net.Conn) net.Conn {
	if c == nil {
		return nil
	}
	return &answeredConn{Conn: c}
}

func (c *answeredConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

func (c *answeredConn) Write(p []byte) (int, error) {
	if c.broken.Load() {
		return len(p), nil
	}
	n, err := c.Conn.Write(p)
	if err != nil {
		c.wfailed.Store(true)
	}
	if err != nil && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) && c.answerCame() {
		c.broken.Store(true)
		return len(p), nil
	}
	return n, err
}

// answerCame reports whether bytes of an answer came, read already or
// still queued in the socket: the Transport's reader may not have run yet
// when its writer meets the reset. After a failed write a peek sees
// queued bytes as open (peekClient), and nothing as an end or an error;
// where it cannot tell (not a socket, not unix) only what was read counts.
func (c *answeredConn) answerCame() bool {
	c.rmu.Lock() // a read under way ends first (its bytes may be the answer)
	c.rmu.Unlock()
	if c.answered.Load() {
		return true
	}
	if _, ok := c.Conn.(syscall.Conn); !ok || runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		return false
	}
	return peekClient(c.Conn) == peerOpen
}
