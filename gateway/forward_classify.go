package gateway

import (
	"errors"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

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
