package gateway

import (
	"errors"
	"fmt"
	"net/http"
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
//     SOCKS code, or the one upstream.TargetReplyCode translates (0x05
//     for squid's ERR_CONNECT_FAIL 111), HTTP 502;
//   - the target timed out behind a healthy upstream: SOCKS 0x06, HTTP 504;
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
	case health.TargetUnreachable:
		cf.SOCKS = repHostUnreachable
		if code, ok := upstream.TargetReplyCode(err); ok && code >= repNetUnreachable && code <= repConnRefused {
			cf.SOCKS = code
		}
		cf.Reason = "the target is unreachable (reported by upstream " + name + ")"
	case health.TargetTimeout:
		cf.SOCKS, cf.Status = repTTLExpired, http.StatusGatewayTimeout
		cf.Reason = "the target did not answer in time (behind upstream " + name + ")"
	default:
		n := 1
		if ae != nil {
			n = len(ae.Attempts)
		}
		cf.Reason = fmt.Sprintf("every attempt failed (%d); last: upstream %s: %s at %s", n, name, f.Class, f.Stage)
		switch code, _ := upstream.RefusalReplyCode(err); code {
		case repAddrNotSupported:
			// No upstream tried can reach this address type (an IPv6
			// target through IPv4-only proxies); the client chose it.
			cf.SOCKS = repAddrNotSupported
			cf.Reason = fmt.Sprintf("every attempt failed (%d); last: upstream %s cannot reach this address type", n, name)
		case repGeneralFailure:
			// A live SOCKS5 upstream could not do this one request
			// (microsocks: the name does not resolve).
			cf.Reason = fmt.Sprintf("every attempt failed (%d); last: upstream %s answered general failure for this destination", n, name)
		case repNotAllowed:
			// The last upstream refused this destination by policy
			// (CONNECT 403, SOCKS5 reply 2): say so, as a proxy would.
			cf.SOCKS, cf.Status = repNotAllowed, http.StatusForbidden
			cf.Reason = fmt.Sprintf("every attempt failed (%d); last: upstream %s refuses this destination by its policy", n, name)
		}
	}
	return cf
}

// noEligibleReason is the client's reason for an expired wait: what the
// upstreams it may use are doing (the tags it asked for, issue 9) and how
// long it waited, which with wait_for_upstream = "0s" is not at all (the
// reason said "waited pool.wait_for_upstream" after 3 ms).
func noEligibleReason(ne *upstream.NoEligibleError) string {
	msg, plain := ne.Error(), ne.Error() == upstream.ErrNoEligible.Error() // plain: nothing more to say
	switch {
	case ne.Wait <= 0:
		return msg // tags nobody carries fail at once: there was no wait
	case ne.Wait < time.Millisecond:
		if plain {
			msg = "no upstream proxy is eligible"
		}
		return msg + " (pool.wait_for_upstream is 0s: no wait)"
	case plain:
		msg = "no upstream proxy became eligible"
	}
	return fmt.Sprintf("%s (waited pool.wait_for_upstream, %s)", msg, ne.Wait)
}

// socksCode returns the SOCKS5 reply code for a pool error.
func socksCode(err error) byte { return explain(err).SOCKS }
