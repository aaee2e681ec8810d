package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"syscall"

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
//   - a healthy upstream reported the target unreachable: the target's own
//     SOCKS code (or 0x05 refused / 0x04 host unreachable), HTTP 502;
//   - the target timed out behind a healthy upstream: SOCKS 0x06, HTTP 504;
//   - every attempt failed on the upstreams themselves: SOCKS 0x01, HTTP 502.
func explain(err error) clientFailure {
	if errors.Is(err, upstream.ErrNoEligible) {
		cf := clientFailure{SOCKS: repGeneralFailure, Status: http.StatusServiceUnavailable, Header: "unavailable",
			Reason: "no upstream proxy became eligible within pool.wait_for_upstream"}
		var ne *upstream.NoEligibleError
		if errors.As(err, &ne) {
			// Name the tags the client asked for (issue 9).
			cf.Reason = ne.Error() + " (waited pool.wait_for_upstream)"
		}
		return cf
	}
	var f *health.Failure
	if !errors.As(err, &f) {
		return clientFailure{SOCKS: repGeneralFailure, Status: http.StatusBadGateway, Header: "upstream_error",
			Reason: "rotor: " + err.Error()}
	}
	name := ""
	var ae *upstream.AttemptsError
	if errors.As(err, &ae) {
		name = ae.Last().Upstream
	}
	cf := clientFailure{SOCKS: repGeneralFailure, Status: http.StatusBadGateway,
		Header: fmt.Sprintf("%s; stage=%s; upstream=%s", f.Class, f.Stage, name)}
	switch f.Class {
	case health.TargetUnreachable:
		cf.SOCKS = repHostUnreachable
		var re *upstream.ReplyError
		switch {
		case errors.As(err, &re) && re.Code >= repNetUnreachable && re.Code <= repConnRefused:
			cf.SOCKS = re.Code
		case errors.Is(err, syscall.ECONNREFUSED):
			cf.SOCKS = repConnRefused
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
		if f.Scope == health.ScopeTarget {
			// The last upstream refused this destination by policy
			// (CONNECT 403, SOCKS5 reply 2): say so, as a proxy would.
			cf.SOCKS, cf.Status = repNotAllowed, http.StatusForbidden
			cf.Reason = fmt.Sprintf("every attempt failed (%d); last: upstream %s refuses this destination by its policy", n, name)
		}
	}
	return cf
}

// socksCode returns the SOCKS5 reply code for a pool error.
func socksCode(err error) byte { return explain(err).SOCKS }
