package gateway

// A kept-alive upstream connection of the Transport's (the forward path's
// non-replayable requests) that ends before any answer to the request
// that went on it.

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"sync/atomic"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// roundTripTransport sends out through e's Transport, prepare setting its
// body and target first. A kept-alive connection that ends before any
// answer makes the error a *closedUnansweredError; an idempotent request
// whose body is all here (none streamed, or none of it read) then goes
// once more, on another connection: the Transport does that itself for
// most such ends, not for a write that broke after some bytes. Not while
// the drain cuts: it is what closed the connection.
func (s *Server) roundTripTransport(e *upstream.Endpoint, cfg *Config, out *http.Request, prepare func(), big *countingBody) (*http.Response, error) {
	for again := false; ; again = true {
		prepare()
		ct := &connTrace{}
		rt := s.transport(e, cfg)
		if big != nil {
			rt = s.freshTransport(e, cfg) // its body cannot go again: no kept-alive connection
		}
		resp, err := rt.RoundTrip(ct.request(out))
		if ac := ct.conn.Load(); err == nil && ac != nil {
			ac.fields.keep(resp) // what http.ReadResponse deleted, for removeHop
		}
		err = ct.closedUnanswered(err, e, out.Method, big, again)
		err = scrubTransportAnswer(e, err)
		if again || !resendable(out.Method) || big != nil && big.n.Load() > 0 || s.cutting.Load() ||
			!errors.As(err, new(*closedUnansweredError)) {
			return resp, err
		}
	}
}

// resendable reports whether method is idempotent (RFC 9110 section
// 9.2.2: PUT and DELETE too), so that a request of it that may have been
// received can go once more after its connection closed unanswered.
// (idempotent, narrower, also decides hedged second opinions and the lean
// client: a PUT is never sent to two upstreams at once.)
func resendable(method string) bool {
	return idempotent(method) || method == http.MethodPut || method == http.MethodDelete
}

// connTrace follows one RoundTrip of the Transport (httptrace): whether
// the request went on a kept-alive connection, whether any byte of a
// final answer came back on it, and the connection (its answeredConn:
// whether a write on it failed). The Transport's errors do not say (its
// errServerClosedIdle and nothingWrittenError stay inside it). Its
// callbacks run on the Transport's goroutines.
type connTrace struct {
	reused, answered atomic.Bool
	interim          atomic.Bool // an interim (1xx) answer came, and nothing of a final one since, as far as rotor can tell
	conn             atomic.Pointer[answeredConn]
}

// request is out with ct tracing its round trip. The trace is composed
// with one out's context has already (interimTrace's).
func (ct *connTrace) request(out *http.Request) *http.Request {
	// Given a Got1xxResponse hook the Transport leaves bounding the
	// interim heads to it: interimTrace's does; without one, this one.
	var bound func(int, textproto.MIMEHeader) error
	if old := httptrace.ContextClientTrace(out.Context()); old == nil || old.Got1xxResponse == nil {
		bound = interimBound()
	}
	return out.WithContext(httptrace.WithClientTrace(out.Context(), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			// Each connection the Transport tries (it retries on another
			// one itself when it may): the last one is what failed.
			ct.reused.Store(i.Reused)
			ct.answered.Store(false)
			ct.interim.Store(false)
			ac := answeredOf(i.Conn)
			ct.conn.Store(ac)
			if ac != nil {
				ac.fields.begin() // the request is about to go: its answer is next
			}
		},
		GotFirstResponseByte: func() { ct.answered.Store(true) },
		// An interim answer ("100 Continue", relayed by squid from the
		// target) is no answer to the request: a connection that ends
		// after it ended before any answer, as one that ends before any
		// byte does. (The Transport reads on past it; an error after it
		// means no final head came whole.)
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			ct.answered.Store(false)
			ct.interim.Store(true)
			if bound != nil {
				return bound(code, h)
			}
			return nil
		},
	}))
}

// closedUnanswered returns err, from the round trip ct followed through
// e, as a *closedUnansweredError when the connection it went on ended
// before any byte of a final answer, and that connection was a kept-alive
// one or, to an http or https proxy, one a write of a streamed body
// failed on after some of it was sent (the proxy ended it while the body
// was coming: a proxy that lost its target answers so itself, squid with
// a 502 of its own; that end is the proxy connection's, never the
// target's), or one that ended after an interim answer only (squid
// relays the target's "100 Continue": the target was reached, and a proxy
// that lost it later answers so itself). A request whose whole head and buffered body went in one
// write, closed unanswered on a fresh connection, stays the target's
// (tinyproxy closes so for a dead target). Neither a timeout
// (slow_body) nor the client's cancel, which keep their meaning. Other
// errors are returned as they are. body is the client's streamed body
// (nil: none), whose bytes, once read, cannot go again, and again that
// the request was sent once more after such an end.
func (ct *connTrace) closedUnanswered(err error, e *upstream.Endpoint, method string, body *countingBody, again bool) error {
	var ne net.Error
	if err == nil || ct.answered.Load() || upstream.IsCanceled(err) ||
		errors.As(err, new(*health.Failure)) || errors.As(err, &ne) && ne.Timeout() {
		return err
	}
	sending := ct.conn.Load().writeFailed()
	proxyEnded := e.AbsoluteForm() && (sending && body != nil && body.n.Load() > 0 || ct.interim.Load())
	if !ct.reused.Load() && !proxyEnded {
		return err
	}
	why := "it went again, on another connection, which closed as well"
	switch {
	case !resendable(method):
		why = method + " is not idempotent and may have been received"
	case body != nil && body.n.Load() > 0 && !again:
		why = "its streamed body was read already"
	}
	how := closedIdle
	switch {
	case sending:
		how = closedSending
	case ct.interim.Load():
		how = closedAfterInterim
	}
	return &closedUnansweredError{upstream: e.Name, why: why, reused: ct.reused.Load(), how: how, err: err}
}

// closedHow is when a connection closedUnansweredError is about ended.
type closedHow int

const (
	closedIdle         closedHow = iota // nothing came and no write failed: an idle timeout met the request
	closedSending                       // a write of the request failed: it ended while the request was sent
	closedAfterInterim                  // after an interim answer only (100 Continue)
)

// closedUnansweredError is a request the Transport sent on an upstream
// connection that then ended before any byte of a final answer: on a
// kept-alive one an idle timeout of the proxy (or, through a tunnel, of
// the target) met the request, or the upstream ended it while the request
// was being sent. The target had no part in it as far as rotor can tell,
// and no one failed: it is reported to no record. The Transport sends a
// request again itself when none of it was written (with GetBody) or when
// it is idempotent with a replayable body; one that got here may have
// been received, so it is not sent twice (RFC 9110 section 9.2.2), and
// the client is told upstream_closed.
type closedUnansweredError struct {
	upstream string
	why      string // why it is not sent again
	reused   bool   // the connection was a kept-alive one
	how      closedHow
	err      error
}

func (e *closedUnansweredError) Error() string {
	conn := "the connection"
	if e.reused {
		conn = "the kept-alive connection"
	}
	var when string
	switch e.how {
	case closedSending:
		when = "it ended while the request was being sent"
	case closedAfterInterim:
		when = "it ended after an interim answer (1xx), with no final one"
	default:
		when = "an idle timeout met the request"
	}
	return conn + " through upstream " + e.upstream + " closed before any answer (" + when + ": " +
		e.err.Error() + "); not sent again: " + e.why
}

func (e *closedUnansweredError) Unwrap() error { return e.err }

// scrubTransportAnswer turns the Transport's error for an answer that
// does not parse, which quotes it (transportAnswerError), into its
// badAnswerError with the quote scrubbed against every secret rotor
// holds (Endpoint.PeerError), as the lean client's is: the quote goes
// into the client's 502, the log and the record. Any other error is
// returned as it is.
func scrubTransportAnswer(e *upstream.Endpoint, err error) error {
	if err == nil || errors.As(err, new(*health.Failure)) || errors.As(err, new(*badAnswerError)) {
		return err
	}
	if bad, ok := transportAnswerError(err).(*badAnswerError); ok && bad != errRespHeadTooLarge {
		return invalidAnswer(e.PeerError(innermost(err)))
	}
	return err
}
