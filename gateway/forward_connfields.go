package gateway

// The Connection fields of a target's answer, read off the upstream
// connection's bytes: net/http's response reader deletes them from an
// HTTP/1.1 answer when "close" is among them (go1.26 transfer.go
// shouldClose), and removeHop then could not remove the fields they name
// (RFC 9110 section 7.6.1): `Connection: close, X-Keep` relayed X-Keep.

import (
	"bytes"
	"net"
	"net/http"
	"sync"
)

// connFields follows an upstream connection's bytes from the start of an
// answer (begin) to the end of its final head, past any interim (1xx but
// 101) heads, keeping the values of the final head's Connection field
// lines (obs-folds joined with a space, as net/http joins them). It keeps
// only the status line's start and Connection lines: a head of 1 MiB
// costs it no more than its Connection fields.
type connFields struct {
	on      bool     // between begin and the final head's end (or end)
	done    bool     // the final head's end was seen: fields is whole
	first   bool     // the current line is a head's status line
	interim bool     // the head being read is an interim one
	inConn  bool     // the last field line was a Connection one (an obs-fold continues it)
	skip    bool     // the current line is of no interest: its bytes are not kept
	line    []byte   // the current line's bytes kept so far
	fields  []string // the current head's Connection values
}

var connPrefix = []byte("connection:")

// begin starts reading a new answer's head.
func (s *connFields) begin() { *s = connFields{on: true, first: true, line: s.line[:0]} }

// end stops reading: bytes fed later are a body's.
func (s *connFields) end() { s.on = false }

// feed takes the next bytes read from the connection.
func (s *connFields) feed(p []byte) {
	for s.on && len(p) > 0 {
		chunk := p
		i := bytes.IndexByte(p, '\n')
		if i >= 0 {
			chunk, p = p[:i], p[i+1:]
		} else {
			p = nil
		}
		if !s.skip {
			s.line = append(s.line, chunk...)
			switch {
			case s.first:
				s.line = s.line[:min(len(s.line), 32)] // "HTTP/1.1 100" is all it needs
			case len(s.line) > fwdMaxResponseHead:
				s.on = false // no client reads such a head
				return
			case !s.wanted():
				s.skip, s.line = true, s.line[:0]
			}
		}
		if i >= 0 {
			s.endLine()
		}
	}
}

// wanted reports whether the current field line, as far as it came, may
// be a Connection line, the continuation of one, or the head's end.
func (s *connFields) wanted() bool {
	l := s.line
	switch {
	case len(l) == 0, len(l) == 1 && l[0] == '\r':
		return true
	case l[0] == ' ' || l[0] == '\t':
		return s.inConn
	}
	n := min(len(l), len(connPrefix))
	return bytes.EqualFold(l[:n], connPrefix[:n])
}

// endLine handles the line that ended (its LF was fed).
func (s *connFields) endLine() {
	line, skipped := trimCR(s.line), s.skip
	s.line, s.skip = s.line[:0], false
	switch {
	case s.first:
		s.first = false
		_, code, _ := bytes.Cut(line, []byte(" "))
		s.interim = len(code) >= 3 && code[0] == '1' && string(code[:3]) != "101"
	case skipped:
		s.inConn = false
	case len(line) == 0:
		if s.interim { // the final head follows
			s.first, s.inConn, s.fields = true, false, nil
			return
		}
		s.on, s.done = false, true
	case line[0] == ' ' || line[0] == '\t':
		if s.inConn && len(s.fields) > 0 {
			if v := bytes.Trim(line, " \t"); len(v) > 0 {
				s.fields[len(s.fields)-1] += " " + string(v)
			}
		}
	case len(line) < len(connPrefix): // a prefix of "connection:" only
		s.inConn = false
	default:
		s.fields = append(s.fields, string(bytes.Trim(line[len(connPrefix):], " \t")))
		s.inConn = true
	}
}

// keep gives resp, the answer whose head s read, back the Connection
// fields http.ReadResponse deleted, for removeHop: only when it did (an
// answer it marked Close, with no Connection left, whose head s read whole
// and found "close" in), so a head s lost track of changes nothing.
func (s *connFields) keep(resp *http.Response) {
	if !s.done || !resp.Close || len(resp.Header["Connection"]) > 0 || !hasToken(http.Header{"Connection": s.fields}, "Connection", "close") {
		return
	}
	resp.Header["Connection"] = s.fields
}

// fieldsConn is a lean client's upstream connection whose reads feed
// its connFields (fwdConn.fields; the exchange's goroutine only).
type fieldsConn struct {
	net.Conn
	f *connFields
}

func (c *fieldsConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.f.feed(p[:n])
	return n, err
}

// syncFields is a connFields shared by a Transport's reader goroutine,
// which feeds it, and the round trip's, which begins and ends it.
type syncFields struct {
	mu sync.Mutex
	f  connFields
}

func (s *syncFields) feed(p []byte) {
	s.mu.Lock()
	s.f.feed(p)
	s.mu.Unlock()
}

func (s *syncFields) begin() {
	s.mu.Lock()
	s.f.begin()
	s.mu.Unlock()
}

// keep is connFields.keep, and ends the reading.
func (s *syncFields) keep(resp *http.Response) {
	s.mu.Lock()
	s.f.keep(resp)
	s.f.end()
	s.mu.Unlock()
}
