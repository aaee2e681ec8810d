package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// h1Body records whether the handler read the request body to its end,
// and sends "100 Continue" before the first read when the client asked.
// It may be read on another goroutine (the Transport's).
type h1Body struct {
	r        io.ReadCloser
	br       *bufio.Reader // the connection's, under r
	w        *h1Writer     // non-nil until 100 Continue was sent
	eof      atomic.Bool
	buffered atomic.Int64 // br.Buffered() after the last read (before the first: at the head's end)
	n        atomic.Int64 // body bytes read (the request line's bytes_up)
}

func (b *h1Body) Read(p []byte) (int, error) {
	if w := b.w; w != nil {
		b.w = nil
		if err := w.sendContinue(); err != nil {
			return 0, err
		}
	}
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	b.buffered.Store(int64(b.br.Buffered()))
	if err == io.EOF {
		b.eof.Store(true)
	}
	return n, err
}

func (b *h1Body) Close() error { return b.r.Close() }

// sendContinue sends "100 Continue" unless the final answer began.
func (w *h1Writer) sendContinue() error {
	w.hc.imu.Lock()
	defer w.hc.imu.Unlock()
	if w.wroteHeader {
		return nil
	}
	_, _ = w.hc.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
	return w.hc.bw.Flush()
}

// interim sends a target's informational answer with its fields h (but
// the hop-by-hop ones and rotor's own) at once, ahead of the final one:
// a proxy MUST forward them (RFC 9110 section 15.2), 102 Processing and
// 103 Early Hints, which both forward paths read past. Not to an HTTP/1.0
// client (a server MUST NOT send it one), and not 100 Continue (rotor
// sends its own when the client asked, h1Body) nor 101 (rotor asks for
// no upgrade, forward.go errSwitchingProtocols); nothing once the final
// answer began. It may run on the Transport's read goroutine while the
// handler waits for the final answer (interimTrace).
func (w *h1Writer) interim(code int, h http.Header) {
	if code <= http.StatusSwitchingProtocols || code >= http.StatusOK || !w.req.ProtoAtLeast(1, 1) {
		return
	}
	hc := w.hc
	hc.imu.Lock()
	defer hc.imu.Unlock()
	if w.wroteHeader || hc.hijacked || w.err != nil {
		return
	}
	h = h.Clone()
	removeHop(h)
	for k := range h {
		if rotorHeader(k) {
			delete(h, k)
		}
	}
	w.writeHead(code, h)
	w.err = hc.bw.Flush()
}

// h1Writer is the http.ResponseWriter of one request.
type h1Writer struct {
	hc          *h1Conn
	req         *http.Request
	h           http.Header
	status      int
	wroteHeader bool // WriteHeader ran (the head may still be held: pending)
	committed   bool // the head is in hc.bw
	pending     []byte
	cl          int64 // declared Content-Length, -1 when none
	written     int64
	chunked     bool
	noBody      bool
	closeAfter  bool
	aborted     bool // the body was cut off: the connection closes without ending it
	reset       bool // aborted close-delimited: the close resets the connection (no FIN first)
	err         error
}

var (
	_ http.ResponseWriter = (*h1Writer)(nil)
	_ http.Flusher        = (*h1Writer)(nil)
	_ http.Hijacker       = (*h1Writer)(nil)
)

func (w *h1Writer) Header() http.Header { return w.h }

// head is the request's head as it came (headScan.head), for forwarding.
func (w *h1Writer) head() []byte { return w.hc.scan.head() }

// WriteHeader records the status; the head is written with the first
// body bytes past h1SmallBody, at Flush, or at the end of the handler,
// when the framing is known. A handler whose body may be slow to come
// flushes it first (writeResponse does, see bodyReady).
func (w *h1Writer) WriteHeader(code int) {
	if w.wroteHeader || w.hc.hijacked {
		return
	}
	if code < 100 || code > 999 {
		panic("invalid WriteHeader code " + strconv.Itoa(code))
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		// An informational answer goes out at once; the final one follows.
		w.writeHead(code, nil)
		w.err = w.hc.bw.Flush()
		return
	}
	w.wroteHeader = true
	w.status = code
	w.noBody = w.req.Method == http.MethodHead || code == http.StatusNoContent || code == http.StatusNotModified
	if v := w.h.Get("Content-Length"); v != "" {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
			w.cl = n
		} else {
			w.h.Del("Content-Length")
		}
	}
}

func (w *h1Writer) Write(p []byte) (int, error) {
	if w.hc.hijacked {
		return 0, http.ErrHijacked
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if w.err != nil {
		return 0, w.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.noBody {
		return 0, http.ErrBodyNotAllowed
	}
	if w.cl >= 0 && w.written+int64(len(p)) > w.cl {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.committed {
		if w.cl >= 0 || len(w.pending)+len(p) > h1SmallBody {
			w.commit(false)
		} else {
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
	}
	if w.chunked {
		_, _ = w.hc.bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
		_, _ = w.hc.bw.WriteString("\r\n")
	}
	_, err := w.hc.bw.Write(p)
	if w.chunked && err == nil {
		_, err = w.hc.bw.WriteString("\r\n")
	}
	if err != nil {
		w.err = err
		return 0, err
	}
	return len(p), nil
}

// commit writes the head. final is true at the end of the handler: a body
// held in pending then gets a Content-Length.
func (w *h1Writer) commit(final bool) {
	if w.committed {
		return
	}
	w.committed = true
	w.hc.answered.Store(true)
	h := w.h
	req := w.req
	if !w.noBody && w.cl < 0 {
		switch {
		case final:
			w.cl = int64(len(w.pending))
			h.Set("Content-Length", strconv.Itoa(len(w.pending)))
		case req.ProtoAtLeast(1, 1):
			w.chunked = true
		default:
			w.closeAfter = true // HTTP/1.0: the body ends with the connection
		}
	}
	if req.Close || !req.ProtoAtLeast(1, 0) || hasToken(h, "Connection", "close") ||
		(!req.ProtoAtLeast(1, 1) && !hasToken(req.Header, "Connection", "keep-alive")) {
		w.closeAfter = true
	}
	switch {
	case w.closeAfter:
		h.Set("Connection", "close")
	case !req.ProtoAtLeast(1, 1):
		h.Set("Connection", "keep-alive")
	}
	if w.chunked {
		h.Set("Transfer-Encoding", "chunked")
	} else {
		h.Del("Transfer-Encoding")
	}
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	w.writeHead(w.status, w.h)
	if len(w.pending) > 0 {
		p := w.pending
		w.pending = nil
		if w.chunked {
			_, _ = w.hc.bw.WriteString(strconv.FormatInt(int64(len(p)), 16))
			_, _ = w.hc.bw.WriteString("\r\n")
		}
		_, _ = w.hc.bw.Write(p)
		if w.chunked {
			_, _ = w.hc.bw.WriteString("\r\n")
		}
	}
}

// writeHead writes the status line and the fields of h (values with CR or
// LF have them turned into spaces, as net/http does).
func (w *h1Writer) writeHead(code int, h http.Header) {
	bw := w.hc.bw
	_, _ = bw.WriteString("HTTP/1.1 ")
	_, _ = bw.WriteString(strconv.Itoa(code))
	_ = bw.WriteByte(' ')
	if text := http.StatusText(code); text != "" {
		_, _ = bw.WriteString(text)
	} else {
		_, _ = bw.WriteString("status code " + strconv.Itoa(code))
	}
	_, _ = bw.WriteString("\r\n")
	for k, vv := range h {
		if !validFieldName(k) {
			continue
		}
		for _, v := range vv {
			writeHeaderLine(bw, k, v)
		}
	}
	_, _ = bw.WriteString("\r\n")
}

// Flush sends the head and what was written so far.
func (w *h1Writer) Flush() {
	if w.hc.hijacked || w.err != nil {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.commit(false)
	w.err = w.hc.bw.Flush()
}

// FlushError is Flush that says whether the client took the bytes (the
// interface http.ResponseController looks for).
func (w *h1Writer) FlushError() error {
	w.Flush()
	return w.err
}

// flushCommitted sends what was written of an answer whose head is out,
// and says whether the client took it: a small answer still held whole
// is left to finish, which gives it a Content-Length.
func (w *h1Writer) flushCommitted() error {
	if w.committed && w.err == nil && !w.hc.hijacked {
		w.err = w.hc.bw.Flush()
	}
	return w.err
}

// finish ends the answer after the handler returned.
func (w *h1Writer) finish() {
	if w.err != nil || w.aborted {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.commit(true)
	if w.chunked {
		_, _ = w.hc.bw.WriteString("0\r\n\r\n")
	}
	if w.cl >= 0 && w.written < w.cl && !w.noBody {
		w.closeAfter = true // the client waits for bytes that will not come
	}
	w.err = w.hc.bw.Flush()
}

// abort ends an answer whose body the handler cannot complete (the
// upstream's body ended early or stalled): the head and the bytes written
// so far go out, then the connection closes without the end of the body,
// as squid does. A chunked body gets no last chunk, a declared
// Content-Length stays unmet, and a small body held back is sent chunked
// rather than with a Content-Length of what arrived: the client sees the
// truncation (curl exit 18, io.ErrUnexpectedEOF) instead of a whole
// answer. To an HTTP/1.0 client a body without a length is
// close-delimited, and a close would look like its end: that connection
// is reset instead (SO_LINGER 0, as tinyproxy's cut ends), so the client
// sees an error (curl exit 56) rather than a whole answer.
func (w *h1Writer) abort() {
	if w.hc.hijacked || w.err != nil || w.aborted {
		return
	}
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	w.aborted = true
	w.closeAfter = true
	w.commit(false)
	w.err = w.hc.bw.Flush()
	if !w.chunked && w.cl < 0 && !w.noBody {
		w.reset = true
		if tc := tcpOf(w.hc.c); tc != nil {
			_ = tc.SetLinger(0)
		}
	}
}

// Hijack hands the connection to the handler (CONNECT). Its limit slot
// moves to hijackRelease until the tunnel ends.
func (w *h1Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hc := w.hc
	if hc.hijacked {
		return nil, nil, http.ErrHijacked
	}
	if w.committed {
		return nil, nil, errors.New("hijack after the answer began")
	}
	hc.hijacked = true
	hc.answered.Store(true)
	hc.s.hijackRelease.Store(hc.c, hc.release)
	return hc.c, bufio.NewReadWriter(hc.br, hc.bw), nil
}

// SetReadDeadline and SetWriteDeadline serve http.ResponseController.
// A handler's own read deadline replaces the body idle limit until it
// clears it (forward.go bounds a small body's whole read so), and its own
// write deadline the send limit.
func (w *h1Writer) SetReadDeadline(t time.Time) error {
	idle := time.Duration(0)
	if t.IsZero() {
		idle = w.hc.s.h1.bodyIdle
	}
	w.hc.lr.idle.Store(int64(idle))
	return w.hc.c.SetReadDeadline(t)
}
func (w *h1Writer) SetWriteDeadline(t time.Time) error {
	w.hc.sl.fixed.Store(!t.IsZero())
	return w.hc.c.SetWriteDeadline(t)
}

// expectsOnlyContinue reports whether every expectation in h's Expect
// fields is 100-continue, the only one RFC 9110 defines (section
// 10.1.1), or there is none: all of the fields' list members count,
// not only the first field's value.
func expectsOnlyContinue(h http.Header) bool {
	for _, v := range h["Expect"] {
		for t := range strings.SplitSeq(v, ",") {
			if t = strings.TrimSpace(t); t != "" && !strings.EqualFold(t, "100-continue") {
				return false
			}
		}
	}
	return true
}

// hasToken reports whether header field name of h lists token
// (comma-separated, case-insensitive).
func hasToken(h http.Header, name, token string) bool {
	for _, v := range h[name] {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
