package gateway

// Log field vocabulary (STYLE rule 49), used by every line rotor writes:
// conn_id, listener, client, user, target, upstream, attempt(s), class,
// stage, from, to, until, dur, bytes_up, bytes_down, outcome, reset, cut
// and silent (how a tunnel ended: relayResult.fields), and the error as
// zerolog's .Err(err) writes it: "error" (errField).
// Passwords, Proxy-Authorization values and upstream userinfo are never
// logged: upstreams appear by name, users by their base name.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// errField is the key .Err(err) writes (zerolog.ErrorFieldName, which
// rotor never changes), for an error given as text: a reason that is no
// error value, or a message already redacted.
const errField = "error"

// finishLease reports what the relay observed and releases the lease.
func (s *Server) finishLease(l *upstream.Lease, addr string, res relayResult) {
	if res.Failure != nil {
		res.Failure.Target = upstream.Request{Addr: addr}.Host()
		l.Fail(res.Failure)
	}
	s.metrics.bytes(res.Up, res.Down)
	l.Done()
}

// stallReporter returns the watchdog's callback for tunnel id on front:
// the failure is recorded against the upstream at once and logged, with
// the conn_id and listener of the tunnel's own summary line (it had
// neither, so a stall could not be told from the upstream's other
// tunnels).
func (s *Server) stallReporter(id uint64, front string, l *upstream.Lease, addr string) func(*health.Failure) {
	return func(f *health.Failure) {
		f.Target = upstream.Request{Addr: addr}.Host()
		l.Fail(f)
		s.log.Info().Uint64("conn_id", id).Str("listener", front).Str("upstream", l.Endpoint.Name).Str("target", addr).
			Str("class", f.Class.String()).Str("stage", f.Stage.String()).Msg("tunnel stalled while the client waits")
	}
}

// logTunnel writes the one summary line of a tunnel (SOCKS5 or CONNECT).
func (s *Server) logTunnel(id uint64, front string, c net.Conn, user, target string, l *upstream.Lease, err error, res relayResult, start time.Time, remote ...string) {
	err = s.drainCut(err)
	outcome := "ok"
	var f *health.Failure
	switch {
	case err != nil:
		outcome = s.errOutcome(err)
		errors.As(err, &f)
	case res.Failure != nil:
		outcome = "slow_body"
		f = res.Failure
	case res.Shutdown:
		outcome = "shutdown"
	case res.ClientGone:
		outcome = "client_gone"
	}
	s.metrics.tunnelDone(front, outcome)
	ev := s.log.Info()
	if outcome != "ok" && !quietOutcome(outcome) && !clientsDoing(err) {
		ev = s.log.Warn()
	}
	client := ""
	if c != nil {
		client = c.RemoteAddr().String()
	} else if len(remote) > 0 {
		client = remote[0]
	}
	ev = ev.Uint64("conn_id", id).Str("listener", front).Str("client", client).Str("target", target).
		Dur("dur", time.Since(start)).Str("outcome", outcome)
	if user != "" {
		ev = ev.Str("user", user)
	}
	if l != nil {
		ev = ev.Str("upstream", l.Endpoint.Name).Int("attempts", len(l.Attempts)+1).
			Int64("bytes_up", res.Up).Int64("bytes_down", res.Down)
	}
	ev = res.fields(ev)
	var ae *upstream.AttemptsError
	if errors.As(err, &ae) {
		ev = ev.Int("attempts", len(ae.Attempts)).Str("upstream", ae.Last().Upstream)
	}
	ev = classified(ev, f)
	if err != nil {
		ev = ev.Err(err)
	}
	ev.Msg("tunnel closed")
}

// classified adds f's class and stage to a summary line. A Failure of no
// class (health.ClassNone: the client's refusal or cancellation, rotor's
// own machine) adds neither: it is no failure of anyone the classes name,
// and README's tables give it none ("—"); the line said "class":"none".
func classified(ev *zerolog.Event, f *health.Failure) *zerolog.Event {
	if f == nil || f.Class == health.ClassNone {
		return ev
	}
	return ev.Str("class", f.Class.String()).Str("stage", f.Stage.String())
}

// clientsDoing reports whether a request that ended with err was refused
// for what the client asked: a target clientRefusal names (rotor itself,
// an invalid target, a destination the direct upstream refuses), or tags
// no upstream carries (NoEligibleError with Matching 0, usually a typo,
// answered at once; its outcome stays unavailable, as the client is
// told). Its line is at info, batched like other info lines, since a
// hostile client can repeat it at will; a warning is written at once,
// one write each.
func clientsDoing(err error) bool {
	var ne *upstream.NoEligibleError
	return clientRefusal(err) || errors.As(err, &ne) && len(ne.Tags) > 0 && ne.Matching == 0
}

// errDrainCut is the error of a request the drain cut when
// shutdown_grace ran out or at a second signal (drainCut): outcome
// shutdown, as for the tunnels it closes then.
var errDrainCut = errors.New("cut by the drain: shutdown_grace ran out, or a second signal")

// drainCut returns errDrainCut for err when the drain cut the request it
// ended: once the drain stopped waiting (s.cutting), a request cancelled
// or whose client seems to have gone away was ended by the drain's own
// cancel and close, which look the same from the request's side. Any
// other error is the request's own and is returned as it is.
func (s *Server) drainCut(err error) error {
	if err == nil || (!s.cutting.Load() && s.ctx.Err() == nil) || errors.Is(err, upstream.ErrNoEligible) {
		return err
	}
	var ce *clientBodyError
	if (errors.As(err, &ce) && ce.fault() == bodyGone) || errors.As(err, new(*clientGoneError)) || errors.Is(err, context.Canceled) {
		return errDrainCut
	}
	return err
}

// errOutcome is the outcome of a tunnel or request that ended with err
// before it was served: "unavailable" when nothing was eligible in time,
// "shutdown" when the drain cut it (errDrainCut), "client_gone" when the
// client left while rotor waited or dialled, while it sent its request
// body, or before a forwarded answer reached it whole (its own doing:
// logged at info, not as a failure), "bad_request" for a request body
// that was malformed or stalled (the client's too), "overloaded" when
// rotor's machine could not dial (upstream.ErrLocalResource), else "failed".
// The log functions pass err through drainCut first.
func (s *Server) errOutcome(err error) string {
	var ce *clientBodyError
	switch {
	case errors.Is(err, upstream.ErrNoEligible):
		return "unavailable"
	case errors.Is(err, errDrainCut):
		return "shutdown"
	case errors.Is(err, upstream.ErrLocalResource):
		s.noteOverloaded(err)
		return "overloaded"
	case errors.As(err, &ce) && ce.fault() != bodyGone:
		return "bad_request"
	case errors.As(err, &ce), errors.As(err, new(*clientGoneError)), errors.Is(err, context.Canceled):
		return "client_gone"
	}
	return "failed"
}

// quietOutcome reports whether outcome is logged at info: the client's
// own doing (client_gone, bad_request) or the drain's (shutdown) is no
// sign of a problem with rotor or upstreams. overloaded (rotor's machine
// is out of fds, ports or memory) is at info too, said at error once per
// acceptLogEvery (noteOverloaded): a warn line per refused request would
// flood the log just when it happens.
func quietOutcome(outcome string) bool {
	return outcome == "client_gone" || outcome == "bad_request" || outcome == "shutdown" || outcome == "overloaded"
}

// noteOverloaded logs, at most once per acceptLogEvery, that dials fail
// for want of a local resource, with how many failed since the last line.
func (s *Server) noteOverloaded(err error) {
	if now := time.Now().UnixNano(); now-s.overloadAt.Load() >= int64(acceptLogEvery) {
		s.overloadAt.Store(now)
		s.log.Error().Err(err).Int64("failed_since_last", s.overloads.Swap(0)).
			Msg("dials fail: rotor is out of a local resource (raise its open-file limit: ulimit -n, LimitNOFILE, docker --ulimit nofile)")
		return
	}
	s.overloads.Add(1)
}

// logForward writes the summary line of one forwarded plain-HTTP request.
// e is the upstream that answered or, for a request that ended before an
// answer, the one of its latest attempt (nil: none was made).
func (s *Server) logForward(id uint64, r *http.Request, user string, e *upstream.Endpoint, att *upstream.Attempts, err error, n int64, start time.Time) {
	err = s.drainCut(err)
	outcome := "ok"
	var f *health.Failure
	if err != nil {
		outcome = s.errOutcome(err)
		errors.As(err, &f)
	}
	if outcome == "failed" && f != nil && f.Class == health.SlowBody {
		outcome = "slow_body" // as a tunnel that stalled is
	}
	if errors.As(err, new(*relayedFailureError)) {
		outcome = f.Class.String() // relayed, but its upstream was reported (target_http_error)
	}
	s.metrics.tunnelDone("http_forward", outcome)
	var up int64
	if b, ok := r.Body.(*h1Body); ok {
		up = b.n.Load()
	}
	ev := s.log.Info()
	refused := err != nil && clientsDoing(err)
	if err != nil && !quietOutcome(outcome) && !refused && !upstream.ClientFault(err) {
		ev = s.log.Warn()
	}
	ev = ev.Uint64("conn_id", id).Str("listener", "http").Str("client", r.RemoteAddr).Str("target", forwardTarget(r)).
		Str("method", r.Method).Dur("dur", time.Since(start)).Str("outcome", outcome).
		Int("attempts", attemptCount(att)).Int64("bytes_up", up).Int64("bytes_down", n)
	if user != "" {
		ev = ev.Str("user", user)
	}
	// The upstream by name, as on a tunnel's line: the one that answered,
	// else the one whose failure the client was told (an attempts
	// error's Last, which X-Rotor-Error names too), else the one the
	// request was on when it ended (the client left, the drain cut it).
	var ae *upstream.AttemptsError
	switch {
	case errors.As(err, &ae) && ae.Last().Upstream != "":
		ev = ev.Str("upstream", ae.Last().Upstream)
	case e != nil:
		ev = ev.Str("upstream", e.Name)
	}
	ev = classified(ev, f)
	if err != nil {
		ev = ev.Err(err)
	}
	if refused {
		// Nothing was forwarded: "request forwarded" said otherwise.
		ev.Msg("request refused")
		return
	}
	if outcome == "unavailable" && attemptCount(att) == 0 {
		ev.Msg("request not forwarded") // no upstream was eligible: none was tried
		return
	}
	ev.Msg("request forwarded")
}

// attemptCount is the number of upstreams att tried, the one that
// answered and those retried for their status included (nil: none were
// made). Counting the failed attempts alone, plus one for the answer,
// logged 1 for a request that m1 and m2 answered with a retry status and
// m3 served.
func attemptCount(att *upstream.Attempts) int {
	if att == nil {
		return 0
	}
	return att.Tried()
}

// httpErrorLog routes net/http's own error lines (TLS noise, malformed
// requests) to zerolog at debug level.
func httpErrorLog(l zerolog.Logger, name string) *log.Logger {
	return log.New(lineWriter(func(p []byte) {
		l.Debug().Str("listener", name).Str(errField, string(bytes.TrimSpace(p))).Msg("http server")
	}), "", 0)
}

type lineWriter func([]byte)

func (w lineWriter) Write(p []byte) (int, error) { w(p); return len(p), nil }

// recoverConn contains a panic to the one connection that caused it: it is
// logged with its context and stack (the panic value redacted: it may
// quote a URL), the connection is closed, and every other tunnel keeps
// running. With c nil it runs in an HTTP handler: it then aborts the
// request with http.ErrAbortHandler, so net/http drops the connection
// instead of answering an empty "200 OK" (which a CONNECT client would
// take for an open tunnel).
func (s *Server) recoverConn(front string, id uint64, c net.Conn) {
	v := recover()
	if v == nil {
		return
	}
	s.panicked(front, id, c, v)
}

// panicked is recoverConn's work once v was recovered.
func (s *Server) panicked(front string, id uint64, c net.Conn, v any) {
	if v == http.ErrAbortHandler {
		panic(v) // net/http's own signal to abort a response quietly
	}
	ev := s.log.Error().Str("listener", front).Uint64("conn_id", id).Str("panic", redactText(fmt.Sprint(v))).Bytes("stack", debug.Stack())
	if c != nil {
		ev = ev.Str("client", c.RemoteAddr().String())
		_ = c.Close()
	}
	ev.Msg("connection handler panicked; connection closed")
	s.metrics.tunnelDone(front, "panic")
	if c == nil {
		panic(http.ErrAbortHandler)
	}
}
