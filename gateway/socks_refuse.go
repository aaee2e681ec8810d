package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"sync"
	"time"
)

// maxSOCKSRefusals bounds the over-limit SOCKS5 clients that are refused
// in a conversation at once (refuseSOCKSSlowly: a goroutine, an fd and up
// to socksRefusalTimeout each). Past it a client whose handshake is not
// all there yet is closed at once: a flood of silent connections costs no
// more than the limit allows plus this many.
const maxSOCKSRefusals = 64

// socksRefusalTimeout bounds one refusal conversation.
const socksRefusalTimeout = 2 * time.Second

// refuseSOCKS refuses a client over a connection limit without ever
// blocking the accept loop. Answering "no acceptable methods" would blame
// authentication, so the refusal is the general failure 0x01 to the
// client's request (RFC 1928 section 6), after a method it offered.
//
// When the client's greeting, authentication and request are already
// queued (a client that pipelines them, or any client by the time the
// backlog is reached under load), the whole answer is written at once
// without waiting. Otherwise, while fewer than maxSOCKSRefusals are
// under way, a goroutine owned by acceptSOCKS (conns) has the
// conversation; past that the connection is closed at once, as the HTTP
// front answers its 503 and closes.
func (s *Server) refuseSOCKS(c net.Conn, conns *sync.WaitGroup) {
	s.metrics.tunnelDone("socks5", "refused_limit")
	var buf [512]byte
	pre := buf[:readNow(c, buf[:])]
	if answer, complete := socksRefusal(pre); complete {
		writeNow(c, answer)
		_ = c.Close()
		return
	}
	if s.socksRefusing.Add(1) > maxSOCKSRefusals {
		s.socksRefusing.Add(-1)
		_ = c.Close()
		return
	}
	if !s.socksHS.add(c) { // the drain began: c is closed
		s.socksRefusing.Add(-1)
		return
	}
	pre = append([]byte(nil), pre...)
	conns.Add(1)
	go func() { // owner: acceptSOCKS (conns); ends within socksRefusalTimeout, or when the drain closes c
		defer conns.Done()
		defer s.socksRefusing.Add(-1)
		defer s.socksHS.done(c)
		refuseSOCKSSlowly(c, pre)
	}()
}

// socksRefusal is the refusal of an over-limit client whose first bytes
// are b, and whether b held enough of its handshake to write it all at
// once: the method chosen (no-auth, else username/password, whose
// credentials are not checked since rotor will not serve), the RFC 1929
// status when it authenticates, and the 0x01 reply once its request
// began. A greeting offering neither method gets 05 FF; a first byte
// other than 5 gets nothing (closed).
func socksRefusal(b []byte) (answer []byte, complete bool) {
	if len(b) == 0 {
		return nil, false
	}
	if b[0] != 5 {
		return nil, true
	}
	if len(b) < 2 || len(b) < 2+int(b[1]) {
		return nil, false
	}
	n := 2 + int(b[1])
	methods := b[2:n]
	switch {
	case bytes.IndexByte(methods, 0x00) >= 0:
		answer = []byte{5, 0x00}
	case bytes.IndexByte(methods, 0x02) >= 0:
		answer = []byte{5, 0x02, 1, 0}
		// RFC 1929: VER ULEN UNAME PLEN PASSWD.
		if len(b) < n+2 || len(b) < n+2+int(b[n+1])+1 {
			return nil, false
		}
		n += 2 + int(b[n+1])
		n += 1 + int(b[n])
	default:
		return []byte{5, 0xFF}, true
	}
	// The request's VER CMD RSV ATYP.
	if len(b) < n+4 {
		return nil, false
	}
	return append(answer, socksReply(repGeneralFailure, nil)...), true
}

// refuseSOCKSSlowly has the refusal conversation with a client whose
// handshake was not all there at accept (pre is what was): it answers
// each message as it arrives, as socksRefusal would, within
// socksRefusalTimeout.
func refuseSOCKSSlowly(c net.Conn, pre []byte) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(socksRefusalTimeout))
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(pre), c), 512)
	head := make([]byte, 2)
	if _, err := io.ReadFull(br, head); err != nil || head[0] != 5 {
		return
	}
	methods := make([]byte, head[1])
	if _, err := io.ReadFull(br, methods); err != nil {
		return
	}
	switch {
	case bytes.IndexByte(methods, 0x00) >= 0:
		_, _ = c.Write([]byte{5, 0x00})
	case bytes.IndexByte(methods, 0x02) >= 0:
		_, _ = c.Write([]byte{5, 0x02})
		var n [2]byte
		if _, err := io.ReadFull(br, n[:]); err != nil {
			return
		}
		if _, err := br.Discard(int(n[1])); err != nil {
			return
		}
		if _, err := io.ReadFull(br, n[:1]); err != nil {
			return
		}
		if _, err := br.Discard(int(n[0])); err != nil {
			return
		}
		_, _ = c.Write([]byte{1, 0})
	default:
		_, _ = c.Write([]byte{5, 0xFF})
		return
	}
	req := make([]byte, 4)
	if _, err := io.ReadFull(br, req); err != nil {
		return
	}
	_, _ = c.Write(socksReply(repGeneralFailure, nil))
}
