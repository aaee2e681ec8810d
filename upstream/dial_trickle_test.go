package upstream

import (
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// trickleProxy is a fake upstream on 127.0.0.1:0 that reads the first
// request bytes of each connection (want of them), then sends answer one
// byte every every, until it is all sent or the connection fails. Its
// goroutines end by themselves and are waited for at cleanup.
func trickleProxy(t *testing.T, want int, answer []byte, every time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				if _, err := io.ReadFull(c, make([]byte, want)); err != nil {
					return
				}
				for i := range answer {
					if _, err := c.Write(answer[i : i+1]); err != nil {
						return
					}
					time.Sleep(every)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestConnectTrickledAnswerIsTimeout: an answer to CONNECT that trickles
// in past the handshake deadline is a timeout at proxy_handshake, as a
// silent proxy's is, not a malformed reply (issue: bufio's ReadLine hands
// back the partial status line "HTTP/1" with no error at the deadline, and
// http.ReadResponse called it malformed: upstream_error).
func TestConnectTrickledAnswerIsTimeout(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	req := "CONNECT " + target.Addr() + " HTTP/1.1\r\nHost: " + target.Addr() + "\r\n\r\n"
	addr := trickleProxy(t, len(req), []byte("HTTP/1.1 200 Connection established\r\n\r\n"), 100*time.Millisecond)
	cfg := testCfg()
	cfg.HandshakeTimeout = 350 * time.Millisecond
	_, err := dial(t, mustDialer(t, &url.URL{Scheme: "http", Host: addr}, cfg), target.Addr())
	wantFailure(t, err, health.Timeout, health.StageProxyHandshake)
	if errors.Is(err, ErrMalformedReply) {
		t.Errorf("err = %v, want no ErrMalformedReply", err)
	}
}

// TestSOCKS5TrickledReplyIsTimeout: the SOCKS5 replies are read with
// io.ReadFull, which keeps the deadline error of a cut message: a reply
// trickling in past the deadline is a timeout, never a malformed reply.
func TestSOCKS5TrickledReplyIsTimeout(t *testing.T) {
	// The method reply trickles: the proxy has proved nothing yet.
	addr := trickleProxy(t, 3, []byte{socks5Version, socks5AuthNone, socks5Version, 0, 0, socks5AtypIPv4, 127, 0, 0, 1, 0, 80}, 300*time.Millisecond)
	cfg := testCfg()
	cfg.HandshakeTimeout = 150 * time.Millisecond
	_, err := dial(t, mustDialer(t, &url.URL{Scheme: "socks5", Host: addr}, cfg), "127.0.0.1:80")
	wantFailure(t, err, health.Timeout, health.StageProxyHandshake)
	if errors.Is(err, ErrMalformedReply) {
		t.Errorf("err = %v, want no ErrMalformedReply", err)
	}
}

// cutReader returns its text, then err: a conn whose read deadline fired
// in the middle of a line.
type cutReader struct {
	text string
	err  error
}

func (r *cutReader) Read(p []byte) (int, error) {
	if r.text == "" {
		return 0, r.err
	}
	n := copy(p, r.text)
	r.text = r.text[n:]
	return n, nil
}

// TestReadConnectResponseCut: readConnectResponse reports the read error
// that cut the answer short, not the parser's view of the fragment.
func TestReadConnectResponseCut(t *testing.T) {
	for _, in := range []string{"HTTP/1", "HTTP/1.1 200 Connection established\r\nVia: 1.", "H"} {
		_, err := readConnectResponse(&cutReader{text: in, err: os.ErrDeadlineExceeded})
		if !isTimeout(err) || errors.Is(err, ErrMalformedReply) {
			t.Errorf("%q: err = %v, want the deadline error", in, err)
		}
		if strings.Contains(err.Error(), "malformed") {
			t.Errorf("%q: err = %v, names no malformed answer", in, err)
		}
	}
	// A cut that is the end of the conn is still malformed.
	_, err := readConnectResponse(&cutReader{text: "HTTP/1", err: io.EOF})
	if !errors.Is(err, ErrMalformedReply) {
		t.Errorf("EOF: err = %v, want ErrMalformedReply", err)
	}
}
