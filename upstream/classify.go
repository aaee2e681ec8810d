package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/rotor-proxy/rotor/health"
)

// Classification table (issue 4; signals from shared/UPSTREAM-SIGNALS.md).
// Typed protocol errors carry their own stage; raw errors take the stage
// the caller knows.
//
//	signal                                          class               stage
//	context.Canceled (client gave up)               none (neutral)      as given
//	ErrInvalidTarget (bad host:port, client's)      (not reported)      target_connect
//	ECONNREFUSED                                    refused             as given
//	no CONNECT reply, proxy alive on this conn (2)  target_timeout      target_connect
//	no CONNECT reply, liveness unproven (2)         timeout             as given
//	deadline / net.Error Timeout                    timeout             as given
//	SOCKS5 method 0xFF (ErrNoAcceptableMethod)      auth_rejected       proxy_auth
//	RFC 1929 status != 0 (*AuthStatusError)         auth_rejected       proxy_auth
//	SOCKS5 REP 1 general failure                    upstream_error      target_connect   (5)
//	SOCKS5 REP 2 not allowed by ruleset             upstream_error      target_connect   (1)
//	SOCKS5 REP 3/4/5 net/host unreachable, refused  target_unreachable  target_connect   (3)
//	SOCKS5 REP 6 TTL expired                        target_timeout      target_connect
//	SOCKS5 REP 7, other                             upstream_error      target_connect
//	SOCKS5 REP 8 address type not supported         upstream_error      target_connect   (3)
//	CONNECT 407, 401 (tinyproxy)                    auth_rejected       proxy_auth
//	CONNECT X-Squid-Error ERR_CONNECT_FAIL 110      target_timeout      target_connect
//	CONNECT X-Squid-Error ERR_CONNECT_FAIL other    target_unreachable  target_connect   (3)
//	CONNECT X-Squid-Error ERR_DNS_FAIL              target_unreachable  target_connect
//	CONNECT X-Squid-Error ERR_INVALID_URL/_REQ, …   (not reported)      proxy_handshake  (4)
//	CONNECT 500 "Unable to connect" (tinyproxy)     target_unreachable  target_connect   (3)
//	CONNECT 504                                     target_timeout      target_connect
//	CONNECT 502/503 without a squid tag             upstream_error      target_connect   (6)
//	CONNECT other 5xx, squid's other errors         upstream_error      target_connect
//	CONNECT 403 (no squid auth tag)                 upstream_error      proxy_handshake  (1)
//	CONNECT 429, other 1xx/3xx/4xx                  upstream_error      proxy_handshake
//	malformed reply / garbage / EOF mid-handshake   upstream_error      as given
//	anything else                                   upstream_error      as given
//
// A proxy's own error answer to a forwarded plain-HTTP request (the
// gateway builds it with stage http_status; see PlainAnswer):
//
//	403 (squid ERR_ACCESS_DENIED: !Safe_ports)      upstream_error      http_status      (1)
//	other 4xx but 401/407/429, ERR_INVALID_URL, …   (not reported)      http_status      (4)
//	anything else                                   upstream_error      http_status
//
// (1) A policy refusal of one destination (stock squid and tinyproxy refuse
// CONNECT to ports other than 443): Failure.Scope is health.ScopePort,
// so the upstream cools for that host:port only (the same host's allowed
// ports stay usable) and the attempt loop tries another upstream; refusing
// several hosts that other upstreams reach cools it entirely (health's
// target-failure rule).
//
// (2) The wait for the proxy's answer to CONNECT is the time the proxy
// takes to reach the target, and it gets its own budget (see
// DialConfig.HandshakeTimeout). A proxy that answered the SOCKS5 greeting
// and authentication, or completed TLS (https), on this very connection
// is alive: a deadline there is the target's, a target that never
// accepts (dante answers REP 6 only after ~31 s, squid 503
// ERR_CONNECT_FAIL 110 after ~61 s, microsocks never). An http:// proxy
// has no greeting, and a pipelined SOCKS5 handshake may have been dropped
// half-way: there the dialer says timeout at proxy_handshake, and the
// attempt loop makes it target_timeout at target_connect when the
// upstream served a tunnel within the last minute (aliveWindow). Neither
// proof of life is sure (a TLS front such as stunnel completes TLS while
// the proxy behind it hangs; a proxy may hang right after serving), so
// the attempt loop retries any target failure elsewhere when another
// upstream reached that host:port lately, and the upstream whose failure
// it was cools for that host:port once another one reaches it (see
// Attempts.Failed).
//
// (3) An address type the upstream cannot reach (ErrAddrType): REP 8
// always; for an IPv6 literal target also REP 3, squid ERR_CONNECT_FAIL
// 97 or 101 and tinyproxy's 500 (an IPv4-only dante answers REP 8, an
// IPv4-bound tinyproxy 500 even for an open IPv6 target). The client
// chose the address type: the upstream cools for that host only (scope
// target) without counting towards the target-failure rule, and another
// upstream is tried; the client gets REP 8 if none can.
//
// (5) REP 1 answers CONNECT after the greeting and authentication went
// through, so the proxy is alive and refused this one request. microsocks,
// gost and many small SOCKS5 servers send it for a name that does not
// resolve or a connect that failed, so it is scoped like (1): the upstream
// cools for that host only and another upstream is tried; one that answers
// REP 1 for several hosts that other upstreams reach cools entirely (the
// target-failure rule), and a failing probe keeps it out. Before, every
// dead domain a scraper asked for cooled each upstream it was tried on.
//
// (6) A generic http proxy (no X-Squid-Error) answering CONNECT with 502
// or 503 most often could not reach the target (a name that does not
// resolve, a refused port): scoped like (5), for that host only, another
// upstream is tried, and the target-failure rule cools the upstream
// entirely when it answers so for hosts other upstreams reach. It cooled
// the upstream whole: one client's typo (CONNECT no-such-host.invalid:443)
// emptied it for every client. A 503 of an overloaded proxy is scoped so
// too; it shows at the next hosts, which the target rule then counts.
// squid's tagged errors and tinyproxy's 500 keep their own rows.
//
// (4) The client's request is at fault (a URL or method the proxy rejects,
// ErrRequestRejected), like ErrInvalidTarget: the attempt loop reports
// nothing to health, tries no other upstream and relays the status.
//
// The direct dialer maps its own connect errors to target_* classes (there
// is no proxy to blame); see dial_direct.go.

// ErrRequestRejected is wrapped by the failure of an upstream proxy's own
// 4xx answer that blames the client's request (squid ERR_INVALID_URL for
// a port past 65535, ERR_UNSUP_REQ, …). It is no failure of the upstream:
// Attempts reports nothing to health and stops, and the client gets the
// proxy's status.
var ErrRequestRejected = errors.New("the upstream proxy rejected the client's request")

// ErrLocalResource is wrapped by the failure of a dial that rotor's own
// machine could not make: out of file descriptors (EMFILE, ENFILE), of
// ephemeral ports (EADDRNOTAVAIL), of socket buffers or memory. It says
// nothing about the upstream or the target: it is reported to no record
// (cooling every upstream in turn would leave the pool down after the
// pressure is gone), no other upstream is tried (it would fail the same
// way), and the client is told rotor is overloaded.
var ErrLocalResource = errors.New("rotor is out of a local resource")

// LocalFailure is the ClassNone failure of a dial rotor's machine could
// not make (ErrLocalResource), at stage.
func LocalFailure(err error, stage health.Stage) *health.Failure {
	return &health.Failure{Class: health.ClassNone, Stage: stage, Err: fmt.Errorf("%w: %w", ErrLocalResource, err)}
}

// ErrAddrType is wrapped by the failure of an upstream that cannot reach
// the target's address type (SOCKS5 REP 8, an IPv6 target through an
// IPv4-only proxy). It cools that upstream for that host only.
var ErrAddrType = errors.New("the upstream cannot reach this address type")

// targetWaitError is a deadline hit while waiting for the proxy's answer
// to CONNECT, that is while the proxy was reaching the target (see (2)
// above). alive is set when the proxy answered on this connection before;
// lately when the attempt loop found that the upstream served a tunnel
// within aliveWindow (servedLately). Either makes the wait the target's
// (target_timeout); without them it is the proxy's timeout at
// proxy_handshake, and the text (the history's detail) says so: it used
// to blame the target whatever the class said.
type targetWaitError struct {
	alive  bool
	lately bool
	err    error
}

func (e *targetWaitError) Error() string {
	switch {
	case e.lately:
		return "no answer while the proxy reaches the target (the upstream served a tunnel within the last minute): " + e.err.Error()
	case e.alive:
		return "no answer while the proxy reaches the target: " + e.err.Error()
	}
	return "the proxy did not answer CONNECT: " + e.err.Error()
}

// servedLately marks e as the wait of an upstream that served a tunnel
// within aliveWindow, which the attempt loop classifies as the target's.
func (e *targetWaitError) servedLately() { e.lately = true }

func (e *targetWaitError) Unwrap() error { return e.err }

// awaitingTarget marks err, from reading the proxy's answer to CONNECT, as
// a wait for the target when it is a deadline.
func awaitingTarget(err error, alive bool) error {
	if err == nil || !isTimeout(err) || IsCanceled(err) {
		return err
	}
	return &targetWaitError{alive: alive, err: err}
}

// Classify turns err, observed at stage, into a *health.Failure. It returns
// nil for a nil err and returns the Failure err already carries (found with
// errors.As) unchanged. Client cancellation yields a Failure of class
// health.ClassNone: it is neither a success nor a failure of the upstream
// (STYLE rule 21); test it with IsCanceled. A proxy's answer that rejects
// the client's request is ClassNone too (errors.Is ErrRequestRejected).
// Classify never returns a class outside the contract's set.
func Classify(err error, stage health.Stage) *health.Failure {
	if err == nil {
		return nil
	}
	var f *health.Failure
	if errors.As(err, &f) {
		return f
	}
	if IsCanceled(err) {
		return &health.Failure{Class: health.ClassNone, Stage: stage, Err: err}
	}
	if health.LocalResource(err) {
		return LocalFailure(err, stage)
	}
	var (
		re *ReplyError
		ce *ConnectStatusError
		ae *AuthStatusError
		tw *targetWaitError
	)
	switch {
	case errors.As(err, &re):
		f := &health.Failure{Class: re.Class(), Stage: health.StageTargetConnect, Err: err}
		switch re.Code {
		case 1: // general failure (see (5)): this destination host
			f.Scope = health.ScopeTarget
		case 2: // not allowed by ruleset (see (1)): this host:port
			f.Scope = health.ScopePort
		case 8: // address type not supported: the client chose it
			f.Scope, f.Err = health.ScopeTarget, fmt.Errorf("%w: %w", ErrAddrType, err)
		}
		return f
	case errors.As(err, &ce):
		if ce.rejectsRequest() {
			return &health.Failure{Class: health.ClassNone, Stage: health.StageProxyHandshake,
				Err: fmt.Errorf("%w: %w", ErrRequestRejected, err)}
		}
		c, s := ce.classify()
		f := &health.Failure{Class: c, Stage: s, Err: err}
		switch {
		case ce.policyRefusal():
			f.Scope = health.ScopePort
		case ce.gatewayFailure():
			f.Scope = health.ScopeTarget
		}
		return f
	case errors.As(err, &ae), errors.Is(err, ErrNoAcceptableMethod):
		return &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth, Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &health.Failure{Class: health.Refused, Stage: stage, Err: err}
	case errors.As(err, &tw) && tw.alive:
		return &health.Failure{Class: health.TargetTimeout, Stage: health.StageTargetConnect, Err: err}
	case isTimeout(err):
		return &health.Failure{Class: health.Timeout, Stage: stage, Err: err}
	}
	return &health.Failure{Class: health.UpstreamError, Stage: stage, Err: err}
}

// PlainAnswer classifies an http:// upstream's own error answer ce to a
// forwarded plain-HTTP request (absolute-form GET; the target may never
// have been reached), as the table above says: a 403 is a policy refusal
// of that destination, other 4xx (but 401, 407, 429) and squid's
// request errors blame the client's request (ErrRequestRejected), the rest
// is upstream_error at http_status. ce is copied with Plain set, so the
// history detail says what was answered. Authentication and target
// failures (407, squid ERR_CONNECT_FAIL, tinyproxy 500) keep the classes
// the CONNECT table gives them.
func PlainAnswer(ce *ConnectStatusError) *health.Failure {
	pc := *ce
	pc.Plain = true
	name, _, _ := strings.Cut(pc.SquidError, " ")
	switch c, s := pc.classify(); {
	case pc.rejectsRequest():
		return &health.Failure{Class: health.ClassNone, Stage: health.StageHTTPStatus,
			Err: fmt.Errorf("%w: %w", ErrRequestRejected, &pc)}
	case pc.policyRefusal():
		return &health.Failure{Class: health.UpstreamError, Stage: health.StageHTTPStatus, Scope: health.ScopePort, Err: &pc}
	case name == "ERR_READ_TIMEOUT":
		return &health.Failure{Class: health.TargetTimeout, Stage: health.StageTargetConnect, Err: &pc}
	case name == "ERR_ZERO_SIZE_OBJECT", name == "ERR_READ_ERROR": // the target closed, or reset, without a whole answer
		return &health.Failure{Class: health.TargetUnreachable, Stage: health.StageTargetConnect, Err: &pc}
	case c.IsTargetFailure():
		return &health.Failure{Class: c, Stage: s, Err: &pc}
	case c == health.AuthRejected:
		// A forwarded answer's fields may be the target's, relayed
		// unchanged: for that host only (see the gateway's
		// classifyProxyResponse); the target rule widens it.
		return &health.Failure{Class: c, Stage: s, Scope: health.ScopeTarget, Err: &pc}
	}
	return &health.Failure{Class: health.UpstreamError, Stage: health.StageHTTPStatus, Scope: health.ScopeTarget, Err: &pc}
}

// PlainStatusError is the *ConnectStatusError (Plain set) of e's own
// error answer to a forwarded plain-HTTP request, from status and
// squidError as the proxy sent them. Its peer text goes through PeerText
// with every secret e's dialer knows (ScrubPeer: its own password and
// Proxy-Authorization token, whatever their length, and DialConfig.Scrub),
// as readConnectAnswer does for an answer to CONNECT; this text goes into
// logs, the record's history and the client's 502. Classification reads
// the raw reason phrase and squid's own word (squidText), not the
// scrubbed text: with a 1-byte secret, scrubbed "ERR_INVALID_URL" or
// "Unable to connect" no longer read as such.
func (e *Endpoint) PlainStatusError(code int, status, squidError string) *ConnectStatusError {
	return &ConnectStatusError{StatusCode: code, Status: e.PeerText(status), SquidError: squidText(squidError, e.PeerText),
		Plain: true, reason: reasonPhrase(status)}
}

// plainAnswer re-classifies a failure the gateway's plain-HTTP forward
// path built for a proxy's own answer (class upstream_error at stage
// http_status, with a *ConnectStatusError cause, which rotor's CONNECT
// dialers never produce) with PlainAnswer. Any other f is returned as is.
func plainAnswer(f *health.Failure) *health.Failure {
	var ce *ConnectStatusError
	if f.Class != health.UpstreamError || f.Stage != health.StageHTTPStatus || !errors.As(f.Err, &ce) {
		return f
	}
	pf := PlainAnswer(ce)
	pf.Target = f.Target
	return pf
}

// forAddrType applies rule (3) above for a request to host: an answer
// that, for an IPv6 literal target, means the upstream has no IPv6 (REP
// 3, squid ERR_CONNECT_FAIL 97/101, tinyproxy's one 500) becomes an
// ErrAddrType refusal scoped to the host. Any other f is returned as is.
func forAddrType(f *health.Failure, host string) *health.Failure {
	if errors.Is(f, ErrAddrType) || !f.Class.IsTargetFailure() {
		return f
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Is6() || ip.Is4In6() {
		var ce *ConnectStatusError
		if !errors.As(f, &ce) || ce.squidErrno() != "97" { // EAFNOSUPPORT: whatever the target
			return f
		}
	} else if !familyAmbiguous(f) {
		return f
	}
	return &health.Failure{Class: health.UpstreamError, Stage: health.StageTargetConnect, Target: f.Target,
		Scope: health.ScopeTarget, Err: fmt.Errorf("%w: %w", ErrAddrType, f.Err)}
}

// familyAmbiguous reports a target failure that an IPv4-only proxy gives
// for any IPv6 target.
func familyAmbiguous(f *health.Failure) bool {
	var (
		re *ReplyError
		ce *ConnectStatusError
	)
	switch {
	case errors.As(f, &re):
		return re.Code == 3 // network unreachable: no IPv6 route
	case errors.As(f, &ce):
		switch ce.squidErrno() {
		case "97", "101": // EAFNOSUPPORT, ENETUNREACH
			return true
		}
		return ce.SquidError == "" && ce.StatusCode == 500 // tinyproxy: "Unable to connect"
	}
	return false
}

// IsCanceled reports whether err comes from the caller cancelling its
// context (the client went away). Such an outcome must be reported to
// health as neutral, never as an upstream failure.
func IsCanceled(err error) bool {
	return err != nil && errors.Is(err, context.Canceled)
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.Is(err, syscall.ETIMEDOUT) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Class is the health class of a SOCKS5 reply code (RFC 1928 §6).
func (e *ReplyError) Class() health.Class {
	switch e.Code {
	case 3, 4, 5: // network unreachable, host unreachable, connection refused
		return health.TargetUnreachable
	case 6: // TTL expired: dante's answer when the target never accepts
		return health.TargetTimeout
	default:
		// 1 general failure and 2 not allowed by ruleset are the proxy's own
		// problem; 7 means it cannot do what every proxy must; 8 is the
		// client's choice of address type (scoped to the host by
		// Classify); >8 is not in the RFC.
		return health.UpstreamError
	}
}

// classify maps a non-2xx answer to CONNECT. On CONNECT every non-2xx comes
// from the proxy (the target was never reached, RFC 9110 §9.3.6), so the
// question is only whether the proxy reports a target failure.
func (e *ConnectStatusError) classify() (health.Class, health.Stage) {
	code := e.StatusCode
	switch {
	case code == 407 || code == 401:
		// 401 is tinyproxy's answer to a wrong password on CONNECT.
		return health.AuthRejected, health.StageProxyAuth
	case e.SquidError != "":
		name, errno, _ := strings.Cut(e.SquidError, " ")
		switch name {
		case "ERR_CONNECT_FAIL":
			if strings.TrimSpace(errno) == "110" { // ETIMEDOUT
				return health.TargetTimeout, health.StageTargetConnect
			}
			return health.TargetUnreachable, health.StageTargetConnect
		case "ERR_DNS_FAIL":
			return health.TargetUnreachable, health.StageTargetConnect
		case "ERR_CACHE_ACCESS_DENIED":
			return health.AuthRejected, health.StageProxyAuth
		}
	}
	switch {
	case code == 500 && strings.EqualFold(strings.TrimSpace(e.rawReason()), "Unable to connect"):
		// tinyproxy: the target refused or never answered.
		return health.TargetUnreachable, health.StageTargetConnect
	case code == 504:
		return health.TargetTimeout, health.StageTargetConnect
	case code >= 500 && code <= 599:
		// The proxy failed to deliver and did not say it was the target's
		// fault; 503 may also be a proxy that is overloaded.
		return health.UpstreamError, health.StageTargetConnect
	default:
		// 403 (proxy ACL), 429 (proxy rate limit), 400/405 and unexpected
		// 1xx/3xx: the proxy refuses to serve us.
		return health.UpstreamError, health.StageProxyHandshake
	}
}

// policyRefusal reports a 403 answering CONNECT that is not an
// authentication problem (squid's ERR_CACHE_ACCESS_DENIED is auth_rejected).
func (e *ConnectStatusError) policyRefusal() bool {
	if e.StatusCode != 403 || strings.HasPrefix(e.SquidError, "ERR_TOO_BIG") { // an answer body over reply_body_max_size
		return false
	}
	c, _ := e.classify()
	return c == health.UpstreamError
}

// gatewayFailure reports a generic http proxy's 502 or 503 answering
// CONNECT (see (6)): no X-Squid-Error, so not squid's own word, which
// keeps its classes; tinyproxy's "500 Unable to connect" and a 504 are
// target failures already.
func (e *ConnectStatusError) gatewayFailure() bool {
	if e.Plain || e.SquidError != "" || e.StatusCode != 502 && e.StatusCode != 503 {
		return false
	}
	c, _ := e.classify()
	return c == health.UpstreamError
}

// squidErrno returns the errno squid appends to ERR_CONNECT_FAIL ("111"),
// "" for other answers.
func (e *ConnectStatusError) squidErrno() string {
	name, errno, _ := strings.Cut(e.SquidError, " ")
	if name != "ERR_CONNECT_FAIL" {
		return ""
	}
	return strings.TrimSpace(errno)
}

// rejectsRequest reports a proxy's answer that blames the client's request,
// not the proxy or the target: squid's request errors (it marks its own
// answers with X-Squid-Error), and on a forwarded plain request any 4xx
// from the proxy but 401/407 (credentials), 403 (policy) and 429 (the
// proxy's rate limit, which is the proxy refusing rotor).
func (e *ConnectStatusError) rejectsRequest() bool {
	name, _, _ := strings.Cut(e.SquidError, " ")
	switch name {
	case "ERR_INVALID_URL", "ERR_INVALID_REQ", "ERR_UNSUP_REQ", "ERR_UNSUP_HTTPVERSION", "ERR_PROTOCOL_UNKNOWN":
		return true
	case "ERR_TOO_BIG":
		// 413/414: the request was; 502: the target's answer head was
		// over squid's reply_header_max_size, and 403 its body over
		// reply_body_max_size (bug: taken for the client's request):
		// another upstream may well fetch those.
		return e.StatusCode == 413 || e.StatusCode == 414
	}
	switch code := e.StatusCode; {
	case !e.Plain, code < 400, code > 499:
		return false
	case code == 401, code == 403, code == 407, code == 429:
		return false
	}
	return true
}

// reasonPhrase returns "Unable to connect" from "500 Unable to connect".
func reasonPhrase(status string) string {
	_, r, _ := strings.Cut(status, " ")
	return r
}

// TargetReplyCode returns the SOCKS5 reply code (RFC 1928 §6) that tells a
// client why its target could not be reached, when err is a target failure
// (class target_unreachable or target_timeout); ok is false otherwise, and
// the SOCKS front then answers from the failure class instead. A SOCKS5
// upstream's own code is relayed as is; the other signals are translated:
//
//	ECONNREFUSED (direct), squid ERR_CONNECT_FAIL 111,
//	tinyproxy 500 Unable to connect                      5 connection refused
//	ENETUNREACH (direct), squid ERR_CONNECT_FAIL 101     3 network unreachable
//	target_timeout                                       6 TTL expired
//	other target_unreachable (DNS, no route, …)          4 host unreachable
func TargetReplyCode(err error) (code byte, ok bool) {
	f := Classify(err, health.StageTargetConnect)
	if f == nil || !f.Class.IsTargetFailure() {
		return 0, false
	}
	var (
		re *ReplyError
		ce *ConnectStatusError
	)
	switch {
	case errors.As(err, &re):
		return re.Code, true
	case f.Class == health.TargetTimeout:
		return 6, true
	case errors.Is(err, syscall.ECONNREFUSED):
		return 5, true
	case errors.Is(err, syscall.ENETUNREACH):
		return 3, true
	case errors.As(err, &ce):
		switch {
		case ce.StatusCode == 500 && ce.SquidError == "", ce.squidErrno() == "111": // ECONNREFUSED
			return 5, true
		case ce.squidErrno() == "101": // ENETUNREACH
			return 3, true
		}
	}
	return 4, true
}

// RefusalReplyCode returns the SOCKS5 reply code for an upstream's refusal
// of one destination (class upstream_error scoped to it): 8 address type
// not supported for ErrAddrType, a SOCKS5 upstream's own code (1 or 2),
// else 2 connection not allowed by ruleset for a policy refusal (scope
// port: CONNECT 403, squid's 403 to a forwarded request). ok is false for
// any other err, including other failures scoped to their target: a
// proxy's other error answers to a forwarded request (squid's 502
// ERR_TOO_BIG, 503 ERR_SHUTTING_DOWN: no policy of the proxy's refused
// them, and a client told 403 / REP 2 would look for one) and a slow
// body on direct.
func RefusalReplyCode(err error) (code byte, ok bool) {
	var f *health.Failure
	if !errors.As(err, &f) || f.Scope != health.ScopeTarget && f.Scope != health.ScopePort || f.Class != health.UpstreamError {
		return 0, false
	}
	var re *ReplyError
	switch {
	case errors.Is(err, ErrAddrType):
		return 8, true
	case errors.As(err, &re):
		return re.Code, true
	case f.Scope == health.ScopePort:
		return 2, true
	}
	return 0, false
}

// ClientFault reports an error the client's request caused, not the
// upstream nor the target: an invalid target (ErrInvalidTarget), a
// request the proxy rejected (ErrRequestRejected), or a destination the
// direct upstream refuses by rotor's policy (ErrDestinationForbidden:
// allow_private_destinations off). It is never reported to health, and no
// other upstream is tried.
func ClientFault(err error) bool {
	return errors.Is(err, ErrInvalidTarget) || errors.Is(err, ErrRequestRejected) || errors.Is(err, ErrDestinationForbidden)
}

// noOnesFault reports a failure that is neither the upstream's nor the
// target's, so it is reported to no record and ends the attempts: the
// client's (ClientFault) or rotor's own machine's (ErrLocalResource).
func noOnesFault(err error) bool { return ClientFault(err) || errors.Is(err, ErrLocalResource) }
