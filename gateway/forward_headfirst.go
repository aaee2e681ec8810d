package gateway

import (
	"bytes"
	"net/http"
	"strconv"
)

// bodyReady reports whether the first Read of resp's body returns
// without waiting for the upstream: no body at all, or bytes of it are
// already in the lean client's buffer (it read them with the head).
// writeResponse sends the head at once otherwise: a target that sends its
// head and then thinks (a slow body, SSE, a long poll) must not keep the
// client from the head until the first body byte (issue: curl's
// time_starttransfer was the body's 8 s, and a client's read timeout
// fired). When it reports true the head goes out with the body's first
// bytes, in one write (issue #8). The Transport's bodies read from a
// buffer rotor cannot see: for them it reports false (but for none).
func bodyReady(resp *http.Response) bool {
	if resp.Body == nil || resp.Body == http.NoBody {
		return true
	}
	b, ok := resp.Body.(*fwdBody)
	if !ok {
		return false
	}
	if b.body == http.NoBody { // HEAD, 204, 304, Content-Length: 0
		return true
	}
	n := b.pc.br.Buffered()
	if n == 0 {
		return false
	}
	if len(resp.TransferEncoding) == 0 {
		return true // a sized or close-delimited body reads what is buffered
	}
	p, _ := b.pc.br.Peek(n)
	return chunkReady(p)
}

// chunkReady reports whether p, the buffered start of a chunked body,
// lets net/http's chunked reader return from its first Read without
// reading on: a whole chunk-size line and a byte of that chunk's data, or
// the last chunk with the end of its (empty or whole) trailer section, or
// a line that cannot be a chunk size (the read fails at once). A size
// line still coming, or a chunk's data, would make that Read wait for
// the upstream.
func chunkReady(p []byte) bool {
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return false
	}
	line := bytes.TrimRight(p[:i], "\r")
	if j := bytes.IndexByte(line, ';'); j >= 0 {
		line = line[:j] // a chunk extension (RFC 9112 section 7.1.1)
	}
	size, err := strconv.ParseUint(string(bytes.TrimSpace(line)), 16, 63)
	rest := p[i+1:]
	switch {
	case err != nil:
		return true
	case size > 0:
		return len(rest) > 0
	}
	// The last chunk: the trailer section ends with an empty line.
	return bytes.HasPrefix(rest, []byte("\r\n")) || bytes.HasPrefix(rest, []byte("\n")) ||
		bytes.Contains(rest, []byte("\n\r\n")) || bytes.Contains(rest, []byte("\n\n"))
}
