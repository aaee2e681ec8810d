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
	"time"
)

// Checks and refusals of the HTTP front's requests (h1.go): what
// http.ReadRequest leaves to net/http's Server, and the answers to a
// request that cannot be served.

// readError answers a request that could not be read as net/http's
// Server does: nothing for a connection that closed, or timed out before
// the head began, 431 for a head over h1MaxHeader (tooLarge), 501 for an
// unknown transfer coding, else 400; each with X-Rotor-Error: bad_request
// and a one-line reason, as rotor's other refusals (requestParseError). A
// head cut off by its deadline (timedOut: bytes of it came, not all of
// them within d) is a 408 whatever the parser made of the part it got: at
// a deadline bufio's ReadLine returns a partial line as a whole one, so a
// cut request line reads as a malformed one. The rest of a refused head
// may still be on its way: the answer lingers, so the close does not
// reset the connection before the client has read it.
func (hc *h1Conn) readError(err error, tooLarge, timedOut bool, d time.Duration) {
	var ne net.Error
	var oe *net.OpError
	switch {
	case tooLarge || errors.Is(err, errHeaderTooLarge):
		hc.plain(http.StatusRequestHeaderFieldsTooLarge, "bad_request",
			"the request head (request line and header fields) is larger than "+strconv.Itoa(h1MaxHeader>>10)+" KiB")
		hc.lingerClose()
	case timedOut:
		hc.s.log.Debug().Str("listener", "http").Str("client", hc.remote).Str(errField, "request head timed out").Msg("bad request")
		hc.plain(http.StatusRequestTimeout, "bad_request", "request head incomplete: not received in full within "+d.String())
		hc.lingerClose()
	case err == io.EOF, errors.As(err, &ne) && ne.Timeout(), errors.As(err, &oe) && oe.Op == "read":
	default:
		hc.s.log.Debug().Str("listener", "http").Str("client", hc.remote).Str(errField, redactText(err.Error())).Msg("bad request")
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
//
// A request line with a space too many ("GET  http://a/ HTTP/1.1", a
// space in the target) is split by the parser at its first two spaces,
// so that what it calls the version has a space in it: that is a
// malformed request line (RFC 9112 section 3: method SP target SP
// version), not a malformed version.
func requestParseError(err error) (int, string) {
	if errors.As(err, new(textproto.ProtocolError)) {
		return http.StatusBadRequest, "malformed header line"
	}
	if errors.Is(err, errLongStray) {
		return http.StatusBadRequest, "a request line over " + strconv.Itoa(h1BufSize>>10) +
			" KiB with a '%' not followed by two hex digits in its path: encode it as %25"
	}
	if errors.As(err, new(*url.Error)) {
		return http.StatusBadRequest, "malformed request target"
	}
	const badVersion = "malformed HTTP version "
	if v, ok := strings.CutPrefix(err.Error(), badVersion); ok && strings.Contains(v, " ") {
		return http.StatusBadRequest, "malformed request line"
	}
	for _, e := range requestParseErrors {
		if strings.HasPrefix(err.Error(), e.prefix) {
			return e.status, e.reason
		}
	}
	return http.StatusBadRequest, "malformed request"
}

const (
	// socks5Version is a SOCKS5 greeting's first byte (RFC 1928 section 3).
	socks5Version = 0x05
	// socks4Version is a SOCKS4 request's first byte (curl -x socks4://).
	socks4Version = 0x04
	// tlsHandshakeRecord is the first byte of a TLS ClientHello's record
	// (RFC 8446 section 5.1, content type handshake).
	tlsHandshakeRecord = 0x16
)

// refuseOtherProtocol answers a client whose first byte, first, says it
// speaks SOCKS5, SOCKS4 or TLS to the HTTP port (no HTTP method starts
// with any of those bytes), at once rather than after the handshake timeout with a
// 408 it could not read. A SOCKS5 client gets 05 FF, "no acceptable
// methods" (RFC 1928 section 3), the refusal every SOCKS5 client reads
// whatever it offered; a SOCKS4 one its "request rejected" (CD 91); a
// TLS client is closed: no TLS alert could tell it
// more than that the port does not speak TLS. As the SOCKS5 port does for
// an HTTP client, a debug line names the port to use, and the refused
// head counts as a handshake_error.
func (hc *h1Conn) refuseOtherProtocol(first byte) {
	s := hc.s
	s.metrics.tunnelDone("http", "handshake_error")
	var why string
	switch first {
	case socks5Version:
		why = "SOCKS5 client on the HTTP port: "
		if addr := s.Addr("socks5"); addr != "" {
			why += "use listen.socks5 " + addr
		} else {
			why += "rotor's SOCKS5 port is off (listen.socks5)"
		}
		_, _ = hc.bw.Write([]byte{socks5Version, 0xFF})
		hc.lingerClose()
	case socks4Version:
		// rotor speaks SOCKS5 only; a SOCKS4 client understands its own
		// "request rejected" (VN 0, CD 91).
		why = "SOCKS4 client on the HTTP port: rotor speaks SOCKS5 (socks5:// or socks5h://) on listen.socks5"
		_, _ = hc.bw.Write([]byte{0, 91, 0, 0, 0, 0, 0, 0})
		hc.lingerClose()
	default:
		why = "TLS client on the HTTP port: it speaks plain HTTP (a proxy URL http://, not https://)"
	}
	s.log.Debug().Str("listener", "http").Str("client", hc.remote).Str(errField, why).Msg("bad request")
}

// plain writes a bare error answer, naming rotorErr in X-Rotor-Error with
// reason as its body (as plainError does), and flushes; the connection
// closes.
func (hc *h1Conn) plain(status int, rotorErr, reason string) {
	// Every caller refuses a request head: counted as the SOCKS5 front
	// counts a malformed handshake.
	hc.s.metrics.tunnelDone("http", "handshake_error")
	_, _ = hc.bw.WriteString("HTTP/1.1 " + strconv.Itoa(status) + " " + http.StatusText(status) +
		"\r\nContent-Type: text/plain; charset=utf-8\r\nX-Rotor-Error: " + rotorErr +
		"\r\nConnection: close\r\nContent-Length: " + strconv.Itoa(len(reason)+1) + "\r\n\r\n" + reason + "\n")
	_ = hc.bw.Flush()
}

// checkRequest applies the checks net/http's Server makes after parsing.
// http.ReadRequest has already refused a second Host header and taken
// the Host header out of req.Header (into req.Host, unless the request
// line's absolute URI names the host, which wins: RFC 9112 section 3.2.2),
// so whether one was sent is host, from the head's bytes (headScan). An
// HTTP/1.1 request without one is refused (RFC 9112 section 3.2), even
// in absolute form, where its value is ignored. CONNECT is exempt, as in
// net/http's Server (golang/go#18215): iOS, old wget and other clients
// send HTTP/1.1 CONNECT without Host (curl, Go, wget 1.21 and Python
// 3.12+ send it; Python 3.11 and older CONNECT in HTTP/1.0), and its
// authority names the target anyway.
func checkRequest(req *http.Request, host bool) string {
	if req.ProtoMajor != 1 {
		return "unsupported protocol version"
	}
	// Field names first: "Host : x" is a malformed field, not a missing Host.
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
	if req.ProtoAtLeast(1, 1) && !host && req.Method != http.MethodConnect {
		return "missing required Host header"
	}
	if !validHostHeader(req.Host) {
		return "malformed Host header"
	}
	return ""
}

// headScan follows a request head's bytes as they are read (headLimit
// feeds it from the head's first byte, serve the bytes already buffered)
// and records what http.ReadRequest does not tell: whether the head has a
// Host field (host; it deletes the field, and fills req.Host from an
// absolute URI), a Content-Length (cl) and a Transfer-Encoding (te) field
// (it drops Content-Length when Transfer-Encoding is chunked, and
// Transfer-Encoding from HTTP/1.0), and whether a read of it timed out. A
// field counts by its name as sent, before the colon (case-insensitive),
// on a line of the head: not in a value, nor after the blank line that
// ends the head. Empty lines before the request line are skipped, as serve
// skips them.
//
// It also keeps the head's bytes (raw, from the request line to the blank
// line), so that a forwarded request's fields go on in the client's order
// and spelling (fwdClient.writeRequest): http.ReadRequest's map keeps
// neither. raw is the connection's, reused by each request (resetHeadScan).
type headScan struct {
	state        uint8    // scanLead, scanRequestLine, scanName, scanRest, scanDone
	n            uint8    // bytes of name so far
	name         [17]byte // the current line's first bytes, lower-cased: len("transfer-encoding")
	host, cl, te bool
	timedOut     bool   // a read of the head reached its deadline
	raw          []byte // the head's bytes so far
}

// reset starts h on a new head, keeping raw's memory unless a
// large head grew it.
func (h *headScan) reset() {
	raw := h.raw[:0]
	if cap(raw) > 8<<10 {
		raw = nil
	}
	*h = headScan{raw: raw}
}

// head is the whole head's bytes, nil while it is not complete. They are
// valid until the next request's head is read.
func (h *headScan) head() []byte {
	if h.state != scanDone {
		return nil
	}
	return h.raw
}

const (
	scanLead        = iota // before the request line
	scanRequestLine        // in the request line
	scanName               // at the start of a field line: its name so far in name
	scanRest               // in the rest of a field line
	scanDone               // past the blank line
)

// started reports whether any of the head came (more than empty lines).
func (h *headScan) started() bool { return h.state != scanLead }

func (h *headScan) feed(p []byte) {
	from := 0 // where the head's bytes in p begin
	if h.state == scanLead {
		from = len(p)
	}
	for i, c := range p {
		switch h.state {
		case scanLead:
			if c != '\r' && c != '\n' {
				h.state = scanRequestLine
				from = i
			}
		case scanRequestLine, scanRest:
			if c == '\n' {
				h.state, h.n = scanName, 0
			}
		case scanName:
			switch {
			case c == '\n':
				if h.n == 0 || (h.n == 1 && h.name[0] == '\r') {
					h.state = scanDone // the blank line
					h.raw = append(h.raw, p[from:i+1]...)
					return
				}
				h.n = 0 // a line without a colon: http.ReadRequest refuses it
			case c == ':':
				switch string(h.name[:h.n]) {
				case "host":
					h.host = true
				case "content-length":
					h.cl = true
				case "transfer-encoding":
					h.te = true
				}
				h.state = scanRest
			case int(h.n) == len(h.name):
				h.state = scanRest // longer than any name looked for
			default:
				if 'A' <= c && c <= 'Z' {
					c += 'a' - 'A'
				}
				h.name[h.n] = c
				h.n++
			}
		case scanDone:
			return
		}
	}
	h.raw = append(h.raw, p[from:]...)
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
