package gateway

import (
	"net/http"
	"strings"
)

// proxyMark is what a forwarded request's 407 says about whose it is.
type proxyMark int

const (
	unmarked     proxyMark = iota // no mark either way: the proxy's or the target's
	markedProxy                   // the proxy's own
	markedTarget                  // relayed by a proxy that marks its own: the target's
)

// own407 says whose a 407 answering a forwarded request is, from the
// marks squid and tinyproxy put on their own answers (UPSTREAM-SIGNALS.md,
// interop TestSignals target_407_relayed / own_407_*): squid's own carry
// X-Squid-Error (ERR_CACHE_ACCESS_DENIED) and tinyproxy's own Server:
// tinyproxy/… and no Via; what they relay carries their Via and neither
// mark (nor the target's Proxy-Authenticate: both drop it, as a hop-by-hop
// field, RFC 9110 section 11.7.1). relayed is relayedBy's. Issue: a
// target's own 407 relayed by tinyproxy or squid was told as "the proxy
// rejected rotor's credentials" and cooled the upstream for the host for
// auth_rejected's 5 minutes. Any of these fields can be forged by a
// target; a 407 marked as the proxy's still cools for that host only.
func own407(h http.Header, relayed string) proxyMark {
	switch {
	case relayed == "tinyproxy":
		// tinyproxy puts no Via on its own answers: this one passed
		// through it.
		return markedTarget
	case h.Get("X-Squid-Error") != "":
		return markedProxy
	case relayed == "squid":
		return markedTarget // squid marks every answer of its own
	case strings.HasPrefix(strings.ToLower(h.Get("Server")), "tinyproxy"):
		return markedProxy
	}
	return unmarked
}

// relayedBy names the proxy, squid or tinyproxy, whose Via entry an answer
// carries ("1.1 host (squid/5.7)", "1.1 host (tinyproxy/1.11.1)"), "" when
// none does: the answer passed through it (squid's own answers carry its
// Via too, tinyproxy's do not).
func relayedBy(h http.Header) string {
	for _, v := range h.Values("Via") {
		v = strings.ToLower(v)
		switch {
		case strings.Contains(v, "(tinyproxy/"):
			return "tinyproxy"
		case strings.Contains(v, "(squid/"), strings.Contains(v, "(squid)"):
			return "squid"
		}
	}
	return ""
}

// unmarked407Error is a 407 answering a forwarded request that bears no
// mark of the proxy's own nor of a relayed answer (own407): the proxy may
// have rejected rotor's credentials, or relayed a target's 407. It is
// reported as auth_rejected for that host only, and the client's reason
// and the history say it may be either.
type unmarked407Error struct{ err error }

func (e *unmarked407Error) Error() string {
	return e.err.Error() + ", which bears no mark of the proxy's own: it may be the target's 407, relayed"
}
func (e *unmarked407Error) Unwrap() error { return e.err }
