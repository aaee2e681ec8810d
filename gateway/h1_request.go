package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
)

// Checks and refusals of the HTTP front's requests (h1.go): what
// http.ReadRequest leaves to net/http's Server, and the answers to a
// request that cannot be served.

// readError answers a request that could not be read as net/http's
// Server does: nothing for a connection that closed or timed out, 431 for
// a head over h1MaxHeader (tooLarge), 501 for an unknown transfer coding,
// else 400; each with X-Rotor-Error: bad_request and a one-line reason,
// as rotor's other refusals (requestParseError). The rest of a refused
// head may still be on its way: the answer lingers, so the close does not
// reset the connection before the client has read it.
func (hc *h1Conn) readError(err error, tooLarge bool) {
	var ne net.Error
	var oe *net.OpError
	switch {
	case tooLarge || errors.Is(err, errHeaderTooLarge):
		hc.plain(http.StatusRequestHeaderFieldsTooLarge, "bad_request",
			"the request head (request line and header fields) is larger than "+strconv.Itoa(h1MaxHeader>>10)+" KiB")
		hc.lingerClose()
	case err == io.EOF, errors.As(err, &ne) && ne.Timeout(), errors.As(err, &oe) && oe.Op == "read":
	default:
		hc.s.log.Debug().Str("listener", "http").Str("client", hc.remote).Str("err", redactText(err.Error())).Msg("bad request")
		status, reason := requestParseError(err)
		hc.plain(status, "bad_request", reason)
		hc.lingerClose()
	}
}

// requestParseErrors maps the beginnings of the texts of http.ReadRequest's
// own errors (go1.26 request.go readRequest; transfer.go fixLength,
// parseContentLength, parseTransferEncoding) to the status and reason the
// client gets. The reasons do not quote the request: a refused line may
// hold credentials. net/http gives only text (its unsupportedTEError is
// unexported): like transportAnswerError this is the one place that
// matches it, and TestH1BadRequests fails if a Go upgrade changes one.
var requestParseErrors = []struct {
	prefix string
	status int
	reason string
}{
	{"unsupported transfer encoding", http.StatusNotImplemented, "unsupported Transfer-Encoding: rotor accepts chunked only"},
	{"too many transfer encodings", http.StatusNotImplemented, "unsupported Transfer-Encoding: rotor accepts one, chunked"},
	{"malformed HTTP request", http.StatusBadRequest, "malformed request line"},
	{"invalid method", http.StatusBadRequest, "invalid method"},
	{"malformed HTTP version", http.StatusBadRequest, "malformed HTTP version"},
	{"too many Host headers", http.StatusBadRequest, "more than one Host header"},
	{"bad Content-Length", http.StatusBadRequest, "invalid Content-Length"},
	{"invalid empty Content-Length", http.StatusBadRequest, "invalid Content-Length"},
	{"http: message cannot contain multiple Content-Length headers", http.StatusBadRequest, "conflicting Content-Length headers"},
}

// requestParseError is the status and reason for a request head that
// http.ReadRequest refused with err: a header line that does not parse
// (textproto.ProtocolError: "Host : x", no colon) and a request target
// that does not (*url.Error) by type, the rest by requestParseErrors.
func requestParseError(err error) (int, string) {
	if errors.As(err, new(textproto.ProtocolError)) {
		return http.StatusBadRequest, "malformed header line"
	}
	if errors.As(err, new(*url.Error)) {
		return http.StatusBadRequest, "malformed request target"
	}
	for _, e := range requestParseErrors {
		if strings.HasPrefix(err.Error(), e.prefix) {
			return e.status, e.reason
		}
	}
	return http.StatusBadRequest, "malformed request"
}

// plain writes a bare error answer, naming rotorErr in X-Rotor-Error with
// reason as its body (as plainError does), and flushes; the connection
// closes.
func (hc *h1Conn) plain(status int, rotorErr, reason string) {
	_, _ = hc.bw.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: text/plain; charset=utf-8\r\nX-Rotor-Error: " + rotorErr +
		"\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(reason)+1) + "\r\n\r\n" + reason + "\n")
	_ = hc.bw.Flush()
}

// checkRequest applies the checks net/http's Server makes after parsing.
// http.ReadRequest has already refused a second Host header and taken
// the Host header out of req.Header (into req.Host, unless the request
// line's absolute URI names the host, which wins: RFC 9112 section 3.2.2).
func checkRequest(req *http.Request) string {
	if req.ProtoMajor != 1 {
		return "unsupported protocol version"
	}
	if req.ProtoAtLeast(1, 1) && req.Host == "" && req.Method != http.MethodConnect {
		return "missing required Host header"
	}
	if !validHostHeader(req.Host) {
		return "malformed Host header"
	}
	for k, vv := range req.Header {
		if !validFieldName(k) {
			return "invalid header name"
		}
		for _, v := range vv {
			if !validFieldValue(v) {
				return "invalid header value"
			}
		}
	}
	return ""
}

// headFraming reports whether the request head at the start of br's
// buffer has a Content-Length (cl) and a Transfer-Encoding (te) field;
// seen is false when the buffer does not hold the whole head. It only
// peeks, before http.ReadRequest parses the head.
func headFraming(br *bufio.Reader) (cl, te, seen bool) {
	b, _ := br.Peek(br.Buffered())
	end := len(b)
	for _, sep := range []string{"\r\n\r\n", "\n\n"} {
		if i := bytes.Index(b, []byte(sep)); i >= 0 && i < end {
			end = i
			seen = true
		}
	}
	if !seen {
		return false, false, false
	}
	b = b[:end]
	_, b, _ = bytes.Cut(b, []byte("\n")) // the request line
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		name, _, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			cl = true
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			te = true
		}
	}
	return cl, te, true
}

// headBuffered reports whether br holds a whole request head.
func headBuffered(br *bufio.Reader) bool {
	b, _ := br.Peek(br.Buffered())
	return bytes.Contains(b, []byte("\r\n\r\n")) || bytes.Contains(b, []byte("\n\n"))
}

// validFieldName reports whether k is an RFC 9110 token (section 5.1).
func validFieldName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validFieldValue reports whether v has no control characters other than
// horizontal tab (RFC 9110 section 5.5); obs-text (0x80-0xFF) is allowed.
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// validHostHeader reports whether h has only bytes a Host header may
// carry: those of RFC 3986's host and port, plus what net/http's Server
// lets through for compatibility ("%" escapes, "[]" for IPv6, and bytes
// of 0x80 and above for names not yet punycoded).
func validHostHeader(h string) bool {
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c >= 0x80:
		case strings.IndexByte("!$%&'()*+,-.:;=[]_~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
