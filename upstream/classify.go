package upstream

import (
	"context"
	"errors"
	"net"
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
//	ECONNREFUSED                                    refused             as given
//	deadline / net.Error Timeout                    timeout             as given
//	SOCKS5 method 0xFF (ErrNoAcceptableMethod)      auth_rejected       proxy_auth
//	RFC 1929 status != 0 (*AuthStatusError)         auth_rejected       proxy_auth
//	SOCKS5 REP 1 general failure                    upstream_error      target_connect
//	SOCKS5 REP 2 not allowed by ruleset             upstream_error      target_connect   (1)
//	SOCKS5 REP 3/4/5 net/host unreachable, refused  target_unreachable  target_connect
//	SOCKS5 REP 6 TTL expired                        target_timeout      target_connect
//	SOCKS5 REP 7/8 command/atyp unsupported, other  upstream_error      target_connect
//	CONNECT 407, 401 (tinyproxy)                    auth_rejected       proxy_auth
//	CONNECT X-Squid-Error ERR_CONNECT_FAIL 110      target_timeout      target_connect
//	CONNECT X-Squid-Error ERR_CONNECT_FAIL other    target_unreachable  target_connect
//	CONNECT X-Squid-Error ERR_DNS_FAIL              target_unreachable  target_connect
//	CONNECT 500 "Unable to connect" (tinyproxy)     target_unreachable  target_connect
//	CONNECT 504                                     target_timeout      target_connect
//	CONNECT other 5xx (incl. 502/503 w/o squid tag) upstream_error      target_connect
//	CONNECT 403 (no squid auth tag)                 upstream_error      proxy_handshake  (1)
//	CONNECT 429, other 1xx/3xx/4xx                  upstream_error      proxy_handshake
//	malformed reply / garbage / EOF mid-handshake   upstream_error      as given
//	anything else                                   upstream_error      as given
//
// (1) A policy refusal of one destination (stock squid and tinyproxy refuse
// CONNECT to ports other than 443): Failure.Scope is health.ScopeTarget,
// so the upstream cools for that host only and the attempt loop tries
// another upstream; refusing several hosts that other upstreams reach cools
// it entirely (health's target-failure rule).
//
// The direct dialer maps its own connect errors to target_* classes (there
// is no proxy to blame); see dial_direct.go.

// Classify turns err, observed at stage, into a *health.Failure. It returns
// nil for a nil err and returns the Failure err already carries (found with
// errors.As) unchanged. Client cancellation yields a Failure of class
// health.ClassNone: it is neither a success nor a failure of the upstream
// (STYLE rule 21); test it with IsCanceled. Classify never returns a class
// outside the contract's set.
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
	var (
		re *ReplyError
		ce *ConnectStatusError
		ae *AuthStatusError
	)
	switch {
	case errors.As(err, &re):
		f := &health.Failure{Class: re.Class(), Stage: health.StageTargetConnect, Err: err}
		if re.Code == 2 { // not allowed by ruleset: this destination, by policy
			f.Scope = health.ScopeTarget
		}
		return f
	case errors.As(err, &ce):
		c, s := ce.classify()
		f := &health.Failure{Class: c, Stage: s, Err: err}
		if ce.policyRefusal() {
			f.Scope = health.ScopeTarget
		}
		return f
	case errors.As(err, &ae), errors.Is(err, ErrNoAcceptableMethod):
		return &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth, Err: err}
	case errors.Is(err, syscall.ECONNREFUSED):
		return &health.Failure{Class: health.Refused, Stage: stage, Err: err}
	case isTimeout(err):
		return &health.Failure{Class: health.Timeout, Stage: stage, Err: err}
	}
	return &health.Failure{Class: health.UpstreamError, Stage: stage, Err: err}
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
		// problem; 7/8 mean it cannot do what every proxy must; >8 is not
		// in the RFC.
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
	case code == 500 && strings.EqualFold(strings.TrimSpace(reasonPhrase(e.Status)), "Unable to connect"):
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
	if e.StatusCode != 403 {
		return false
	}
	c, _ := e.classify()
	return c == health.UpstreamError
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
//	destination forbidden by policy                      2 not allowed by ruleset
//	ECONNREFUSED (direct), squid ERR_CONNECT_FAIL 111,
//	tinyproxy 500 Unable to connect                      5 connection refused
//	ENETUNREACH (direct)                                 3 network unreachable
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
	case errors.Is(err, ErrDestinationForbidden):
		return 2, true
	case errors.Is(err, syscall.ECONNREFUSED):
		return 5, true
	case errors.Is(err, syscall.ENETUNREACH):
		return 3, true
	case errors.As(err, &ce):
		if ce.StatusCode == 500 || strings.TrimSpace(strings.TrimPrefix(ce.SquidError, "ERR_CONNECT_FAIL")) == "111" {
			return 5, true
		}
	}
	return 4, true
}
