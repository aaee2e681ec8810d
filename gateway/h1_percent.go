package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"net/url"
	"strings"
)

// A request target with a "%" that starts no escape ("/50%-off",
// "?q=100%") is refused by http.ReadRequest (url.ParseRequestURI: "invalid
// URL escape"), but curl and raw scrapers send such targets and squid and
// tinyproxy forward them as they are. Before the parse, straySink blanks
// those "%" of the path in the buffered request line (a "_" in their place, so the
// line parses); after it, restoreStray puts the client's target back in
// RequestURI (which forwarding sends on, originTarget) and parses a URL
// with each stray "%" read as "%25", the byte it stands for.

// straySink rewrites the stray "%" of the request line buffered in br in
// place and returns the target as the client sent it, or "" when there
// was none (or the line did not come whole: the parser then answers as
// before; a line must fit the 4 KiB buffer to be mended, and long
// reports one that did not). Only the path and query are touched: a "%"
// in an authority is a zone or an error, and stays the parser's to judge.
func straySink(br *bufio.Reader) (orig string, long bool) {
	// The line may come in pieces (a slow client, a second request's
	// line split across segments): peek until its end is buffered. An
	// error (the head's deadline, the end of the connection, a line
	// longer than the buffer) leaves the line to the parser, which meets
	// the same error or line and answers as it does.
	var b []byte
	end := -1
	for n := max(br.Buffered(), 1); end < 0; n = len(b) + 1 {
		var err error
		b, err = br.Peek(n)
		if end = bytes.IndexByte(b, '\n'); end < 0 && err != nil {
			return "", errors.Is(err, bufio.ErrBufferFull)
		}
	}
	line := b[:end]
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 < 0 || sp2 <= sp1 {
		return "", false
	}
	target := line[sp1+1 : sp2]
	from := pathStart(target)
	if from < 0 {
		return "", false
	}
	for i := from; i < len(target) && target[i] != '?'; i++ {
		if target[i] != '%' || (i+2 < len(target) && ishex(target[i+1]) && ishex(target[i+2])) {
			continue
		}
		if orig == "" {
			orig = string(target)
		}
		target[i] = '_'
	}
	return orig, false
}

// pathStart is the offset of target's path (or query) in an origin-form
// or absolute-form request target, or -1 when it has none to mend: the
// authority form of CONNECT, "*", or an absolute URI without a path.
func pathStart(target []byte) int {
	if i := bytes.Index(target, []byte("://")); i >= 0 && target[0] != '/' {
		j := bytes.IndexAny(target[i+3:], "/?")
		if j < 0 {
			return -1
		}
		return i + 3 + j
	}
	if len(target) == 0 || target[0] != '/' {
		return -1
	}
	return 0
}

// errLongStray is the parse error of a request line too long for
// straySink to mend (over h1BufSize) whose only fault is a stray "%" in
// its path: the client is told to escape it (requestParseError).
var errLongStray = errors.New("a stray '%' in a request line too long to forward as sent")

// longStray reports whether err, http.ReadRequest's error for a request
// line straySink could not mend, is that of a stray "%" in the target's
// path: the target parses once those are written "%25".
func longStray(err error) bool {
	var ue *url.Error
	if !errors.As(err, &ue) || !errors.As(err, new(url.EscapeError)) {
		return false
	}
	from := pathStart([]byte(ue.URL))
	if from < 0 {
		return false
	}
	_, perr := url.ParseRequestURI(ue.URL[:from] + escapeStray(ue.URL[from:]))
	return perr == nil
}

// escapeStray is target with each "%" of its path that starts no escape
// written "%25" (a query is kept raw by the parser, stray "%" and all).
func escapeStray(target string) string {
	var b strings.Builder
	q := strings.IndexByte(target, '?')
	if q < 0 {
		q = len(target)
	}
	for i := 0; i < len(target); i++ {
		if i >= q {
			b.WriteString(target[i:])
			break
		}
		if target[i] == '%' && !(i+2 < len(target) && ishex(target[i+1]) && ishex(target[i+2])) {
			b.WriteString("%25")
			continue
		}
		b.WriteByte(target[i])
	}
	return b.String()
}

// restoreStray gives u, parsed from a line straySink rewrote, the client's
// target orig back: it reports false when orig does not parse even with
// its stray "%" escaped.
func restoreStray(requestURI *string, u **url.URL, orig string) bool {
	parsed, err := url.ParseRequestURI(escapeStray(orig))
	if err != nil {
		return false
	}
	*requestURI, *u = orig, parsed
	return true
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
