package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"
)

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
