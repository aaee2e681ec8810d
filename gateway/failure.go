package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// clientFailure is how one failed request is explained to the client.
type clientFailure struct {
	SOCKS  byte   // RFC 1928 reply code
	Status int    // HTTP status
	Header string // X-Rotor-Error value
	Reason string // plain-text body
}

// explain maps a pool error to what the client is told. The mapping lives
// here, in one place, for both fronts:
//   - nothing eligible within wait_for_upstream: SOCKS 0x01, HTTP 503,
//     X-Rotor-Error: unavailable;
//   - a destination the direct upstream refuses by policy
//     (upstream.ErrDestinationForbidden): SOCKS 0x02, HTTP 403, forbidden;
//   - the client's own fault: a target no upstream can be asked for
//     (upstream.ErrInvalidTarget): SOCKS 0x04, HTTP 400, bad_request; a
//     request an upstream proxy rejected (upstream.ErrRequestRejected,
//     e.g. squid's 400 ERR_INVALID_URL): SOCKS 0x04, the proxy's own 4xx
//     status;
//   - a healthy upstream reported the target unreachable: the target's own
//     SOCKS code, or the one its signal translates to (0x05 for squid's
//     ERR_CONNECT_FAIL 111), HTTP 502, the reason and X-Rotor-Error's
//     kind saying what the signal was (refused, name_not_resolved,
//     network_unreachable, host_unreachable, closed, reset; see
//     targetKindOf);
//   - the target timed out behind a healthy upstream: SOCKS 0x06, HTTP 504,
//     kind timeout;
//   - the last upstream refused this destination (scope target): by its
//     policy (CONNECT 403, SOCKS5 reply 2) SOCKS 0x02, HTTP 403; for its
//     address type (SOCKS5 reply 8, an IPv6 target through an IPv4-only
//     proxy) SOCKS 0x08, HTTP 502;
//   - every attempt failed on the upstreams themselves: SOCKS 0x01, HTTP 502;
//   - rotor's own machine could not dial (upstream.ErrLocalResource:
//     out of file descriptors, ports, memory): SOCKS 0x01, HTTP 503,
//     X-Rotor-Error: overloaded; no upstream is blamed;
//   - the request was cancelled (its client left, or rotor is shutting
//     down): SOCKS 0x01, HTTP 503, X-Rotor-Error: canceled. It is nobody's
//     failure, least of all an upstream's.
func explain(err error) clientFailure {
	if errors.Is(err, upstream.ErrNoEligible) {
		cf := clientFailure{SOCKS: repGeneralFailure, Status: http.StatusServiceUnavailable, Header: "unavailable",
			Reason: "no upstream proxy became eligible within pool.wait_for_upstream"}
		var ne *upstream.NoEligibleError
		if errors.As(err, &ne) {
			cf.Reason = noEligibleReason(ne)
		}
		return cf
	}
	name := ""
	var ae *upstream.AttemptsError
	if errors.As(err, &ae) {
		name = ae.Last().Upstream
	}
	if errors.Is(err, upstream.ErrLocalResource) {
		why := "file descriptors, ports or memory"
		var errno syscall.Errno
		if errors.As(err, &errno) {
			why = errno.Error()
		}
		return clientFailure{SOCKS: repGeneralFailure, Status: http.StatusServiceUnavailable, Header: "overloaded",
			Reason: "rotor is out of a local resource (" + why + "); no upstream is blamed"}
	}
	if errors.Is(err, upstream.ErrDestinationForbidden) {
		// The direct upstream refuses a private or loopback destination
		// (allow_private_destinations off), or one that resolved to
		// rotor's own listener: the client asked for it. The reason names
		// the destination and the rule, not the attempt that met it (its
		// text, "all 1 attempts failed; upstream direct: target_connect:
		// none: dial tcp …", told the client of an internal class).
		cf := clientFailure{SOCKS: repNotAllowed, Status: http.StatusForbidden, Header: "forbidden",
			Reason: errSelfTarget.Error()}
		if !errors.Is(err, errSelfTarget) {
			dest := "the destination"
			var f *health.Failure
			if errors.As(err, &f) && f.Target != "" {
				dest += " " + f.Target
			}
			cf.Reason = "rotor: " + dest + " is not allowed (allow_private_destinations is off)"
		}
		return cf
	}
	if errors.Is(err, upstream.ErrInvalidTarget) {
		return clientFailure{SOCKS: repHostUnreachable, Status: http.StatusBadRequest, Header: "bad_request",
			Reason: "rotor: " + err.Error()}
	}
	var ce *upstream.ConnectStatusError
	if errors.Is(err, upstream.ErrRequestRejected) && errors.As(err, &ce) {
		status := ce.StatusCode
		if status < 400 || status > 599 {
			status = http.StatusBadRequest
		}
		return clientFailure{SOCKS: repHostUnreachable, Status: status, Header: "bad_request; upstream=" + name,
			Reason: fmt.Sprintf("upstream %s rejected the request: %v", name, ce)}
	}
	var f *health.Failure
	if !errors.As(err, &f) {
		if upstream.IsCanceled(err) {
			return clientFailure{SOCKS: repGeneralFailure, Status: http.StatusServiceUnavailable, Header: "canceled",
				Reason: "the request was cancelled before an upstream answered (the client left, or rotor is shutting down)"}
		}
		return clientFailure{SOCKS: repGeneralFailure, Status: http.StatusBadGateway, Header: "upstream_error",
			Reason: "rotor: " + err.Error()}
	}
	cf := clientFailure{SOCKS: repGeneralFailure, Status: http.StatusBadGateway,
		Header: fmt.Sprintf("%s; stage=%s; upstream=%s", f.Class, f.Stage, name)}
	switch f.Class {
	case health.TargetUnreachable, health.TargetTimeout:
		k := targetKindOf(err, f)
		cf.SOCKS, cf.Reason = k.code, k.what+" ("+k.source(name)+")"
		if k.name != "" {
			cf.Header += "; kind=" + k.name
		}
		if f.Class == health.TargetTimeout {
			cf.SOCKS, cf.Status = repTTLExpired, http.StatusGatewayTimeout
		}
	default:
		n, waited := 1, false
		if ae != nil {
			n, waited = len(ae.Attempts), ae.Waited
		}
		// lead says what failed, before ": <class> at <stage> (…)"; who
		// is the subject of a refusal's reason, before its verb ("all 3
		// attempts failed; the last, upstream dc-1, refuses …").
		lead := fmt.Sprintf("all %d attempts failed on the upstreams themselves; the last, upstream %s", n, name)
		who := fmt.Sprintf("all %d attempts failed; the last, upstream %s,", n, name)
		if n == 1 {
			lead, who = "the attempt failed on upstream "+name+" itself", "upstream "+name
		}
		then := ""
		if waited {
			then = "; no other upstream became eligible within pool.wait_for_upstream"
		}
		meaning := classMeaning(f.Class)
		if errors.As(err, new(*unmarked407Error)) {
			meaning = "the proxy rejected rotor's credentials for it, or relayed the target's own 407: the answer bears no mark of the proxy's own"
		}
		cf.Reason = fmt.Sprintf("%s: %s at %s (%s)%s; retry later: rotor cools an upstream that fails and picks another",
			lead, f.Class, f.Stage, meaning, then)
		switch code, _ := upstream.RefusalReplyCode(err); code {
		case repAddrNotSupported:
			// No upstream tried can reach this address type (an IPv6
			// target through IPv4-only proxies); the client chose it.
			cf.SOCKS = repAddrNotSupported
			cf.Reason = who + " cannot reach this address type (an IPv6 target through an IPv4-only proxy)" + then +
				"; send a host name or an IPv4 address instead"
		case repGeneralFailure:
			// A live SOCKS5 upstream could not do this one request
			// (microsocks: the name does not resolve).
			cf.Reason = who + " answered general failure (SOCKS5 reply 1) for this destination, as small SOCKS5 servers do " +
				"for a name that does not resolve or a connect that failed" + then + "; check the target's name and port"
		case repNotAllowed:
			// The last upstream refused this destination by its policy
			// (CONNECT 403, SOCKS5 reply 2): say so, as a proxy would.
			cf.SOCKS, cf.Status = repNotAllowed, http.StatusForbidden
			cf.Reason = who + " refuses this destination by its policy (proxies often allow CONNECT to port 443 only)" + then +
				"; use a port the upstreams allow, or ask their operator to allow this one"
		}
	}
	return cf
}

// classMeaning says in words what a failure class of an upstream means,
// for the client's reason.
func classMeaning(c health.Class) string {
	switch c {
	case health.Refused:
		return "the proxy refused rotor's connection"
	case health.Timeout:
		return "the proxy did not answer in time"
	case health.AuthRejected:
		return "the proxy rejected rotor's credentials for it"
	case health.UpstreamError:
		return "the proxy answered with an error, or not in its protocol"
	case health.SlowBody:
		return "no answer came back in time"
	case health.TargetHTTPError:
		return "the answer's status counts against the upstream"
	}
	return "the upstream failed"
}

// noEligibleReason is the client's reason for an expired wait: what the
// upstreams it may use are doing (the tags it asked for, issue 9) and how
// long it waited, which with wait_for_upstream = "0s" is not at all (the
// reason said "waited pool.wait_for_upstream" after 3 ms).
func noEligibleReason(ne *upstream.NoEligibleError) string {
	msg, plain := ne.Error(), ne.Error() == upstream.ErrNoEligible.Error() // plain: nothing more to say
	switch {
	case ne.Wait <= 0:
		return msg + noEligibleAdvice(ne) // tags nobody carries fail at once: there was no wait
	case ne.Wait < time.Millisecond:
		if plain {
			msg = "no upstream proxy is eligible"
		}
		return msg + " (pool.wait_for_upstream is 0s: no wait)" + noEligibleAdvice(ne)
	case plain:
		msg = "no upstream proxy became eligible"
	}
	return fmt.Sprintf("%s (waited pool.wait_for_upstream, %s)%s", msg, ne.Wait, noEligibleAdvice(ne))
}

// noEligibleAdvice says what the client can do about an expired wait,
// after "; ": fix tags no upstream carries, wait for an operator when
// every upstream it may use is disabled, else retry (the reason says when
// the next one is due, when one cools).
func noEligibleAdvice(ne *upstream.NoEligibleError) string {
	switch {
	case len(ne.Tags) > 0 && ne.Matching == 0:
		return "; check the tag-<tag> parameters of the proxy username (tags match exactly)"
	case ne.Matching == 1 && ne.Disabled == 1:
		return "; retrying will not help until an operator enables it"
	case ne.Matching > 0 && ne.Disabled == ne.Matching:
		return "; retrying will not help until an operator enables one"
	}
	return "; retry later"
}

// socksCode returns the SOCKS5 reply code for a pool error.
func socksCode(err error) byte { return explain(err).SOCKS }

// targetKind is what a target failure was, as the client is told: its
// name (X-Rotor-Error's kind; "" when the signal does not say), what
// happened, the RFC 1928 code of that kind, and the signal that said so
// (scrubbed, never more of the peer's bytes than its status or tag).
type targetKind struct {
	name, what string
	code       byte
	signal     string
	direct     bool // rotor's own connect (direct://) met it, not a proxy
}

// source names who met the failure and the signal: "reported by upstream
// dante: SOCKS5 reply 5", "upstream direct, connecting directly: no such
// host", "behind upstream dc-1" when the signal says nothing more.
func (k targetKind) source(name string) string {
	switch {
	case k.signal == "":
		return "behind upstream " + name
	case k.direct:
		return "upstream " + name + ", connecting directly: " + k.signal
	}
	return "reported by upstream " + name + ": " + k.signal
}

// Target failure kinds. A name that does not resolve is RFC 1928's host
// unreachable (dante answers REP 4 for one), as are a target that closed
// or reset before answering (there is no better code).
var (
	kindRefused     = targetKind{name: "refused", what: "the target refused the connection", code: repConnRefused}
	kindNoName      = targetKind{name: "name_not_resolved", what: "the target's name did not resolve", code: repHostUnreachable}
	kindNetUnreach  = targetKind{name: "network_unreachable", what: "the target's network is unreachable", code: repNetUnreachable}
	kindHostUnreach = targetKind{name: "host_unreachable", what: "the target host is unreachable", code: repHostUnreachable}
	kindClosed      = targetKind{name: "closed", what: "the target closed the connection without answering", code: repHostUnreachable}
	kindReset       = targetKind{name: "reset", what: "the target reset the connection", code: repHostUnreachable}
	kindUnreachable = targetKind{what: "the target is unreachable", code: repHostUnreachable}
	kindTimeout     = targetKind{name: "timeout", what: "the target timed out", code: repTTLExpired}
	// tinyproxy's 500 "Unable to connect" is its answer to a refused
	// port, a name that does not resolve and an unreachable host alike,
	// and its page gives no errno: rotor cannot say which.
	kindNoReason = targetKind{what: "the upstream could not connect to the target (it does not say why: refused, unresolvable or unreachable)", code: repHostUnreachable}
)

// targetKindOf reads the kind of a target failure (f, the one err
// answers with) from its signal: a SOCKS5 upstream's REP, squid's
// X-Squid-Error (ERR_CONNECT_FAIL with its errno, ERR_DNS_FAIL, …),
// tinyproxy's 500 Unable to connect, or the errno or DNS error of the
// direct upstream's own connect. The codes agree with
// upstream.TargetReplyCode, which stays the answer for a signal not
// read here.
func targetKindOf(err error, f *health.Failure) targetKind {
	var (
		re  *upstream.ReplyError
		ce  *upstream.ConnectStatusError
		dns *net.DNSError
		k   targetKind
	)
	switch {
	case errors.As(err, &re):
		switch re.Code {
		case repNetUnreachable:
			k = kindNetUnreach
		case repHostUnreachable:
			k = kindHostUnreach
		case repConnRefused:
			k = kindRefused
		case repTTLExpired:
			k = kindTimeout
		default:
			k = kindUnreachable
		}
		k.signal = fmt.Sprintf("SOCKS5 reply %d", re.Code)
	case errors.As(err, &ce):
		k = squidKind(ce)
		if ce.SquidError != "" {
			k.signal = upstream.PeerText(ce.SquidError)
		} else {
			k.signal = upstream.PeerText(ce.Status)
		}
	case f.Class == health.TargetTimeout:
		k = kindTimeout
		if f.Stage == health.StageTargetConnect && isDirectTimeout(err) {
			k.signal, k.direct = "connect timed out", true
			if errors.As(err, &dns) {
				k.signal = "name lookup timed out"
			}
		}
	case errors.Is(err, syscall.ECONNREFUSED):
		k, k.signal, k.direct = kindRefused, syscall.ECONNREFUSED.Error(), true
	case errors.Is(err, syscall.ENETUNREACH):
		k, k.signal, k.direct = kindNetUnreach, syscall.ENETUNREACH.Error(), true
	case errors.Is(err, syscall.EHOSTUNREACH):
		k, k.signal, k.direct = kindHostUnreach, syscall.EHOSTUNREACH.Error(), true
	case errors.As(err, &dns):
		k, k.direct = kindNoName, true
		k.signal = "no such host"
		if !dns.IsNotFound {
			k.signal = upstream.PeerText(dns.Err)
		}
	default:
		k = kindUnreachable
		if code, ok := upstream.TargetReplyCode(err); ok && code >= repNetUnreachable && code <= repConnRefused {
			k.code = code
		}
	}
	if f.Class == health.TargetTimeout {
		k.name, k.what, k.code = kindTimeout.name, kindTimeout.what, repTTLExpired
	}
	return k
}

// isDirectTimeout reports a timeout of rotor's own connect to the target.
func isDirectTimeout(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && op.Timeout()
}

// squidKind is the kind of a proxy's answer that blames the target:
// squid's tag (ERR_CONNECT_FAIL with the connect's errno: 111 refused,
// 101 network unreachable, 113 no route, 110 timed out), tinyproxy's 500
// "Unable to connect" (its answer to a refused connect).
func squidKind(ce *upstream.ConnectStatusError) targetKind {
	tag, errno, _ := strings.Cut(ce.SquidError, " ")
	switch tag {
	case "ERR_CONNECT_FAIL":
		switch strings.TrimSpace(errno) {
		case "111":
			return kindRefused
		case "101":
			return kindNetUnreach
		case "113":
			return kindHostUnreach
		case "110":
			return kindTimeout
		}
		return kindUnreachable
	case "ERR_DNS_FAIL":
		return kindNoName
	case "ERR_ZERO_SIZE_OBJECT":
		return kindClosed
	case "ERR_READ_ERROR":
		return kindReset
	case "ERR_READ_TIMEOUT":
		return kindTimeout
	case "":
		if ce.StatusCode == http.StatusInternalServerError {
			return kindNoReason // tinyproxy
		}
	}
	return kindUnreachable
}
