package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestSOCKSFrontAnswersOtherProtocols: a client that speaks something
// else on the SOCKS5 port, or a broken SOCKS5, is told so before the
// connection closes. Issue: each was closed without a byte.
func TestSOCKSFrontAnswersOtherProtocols(t *testing.T) {
	srv, logs := startGateway(t, listenConf("")+noUpstreamConf)
	dial := func(t *testing.T) net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", srv.Addr("socks5"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		return c
	}
	// exchange writes each message after reading the answer to the one
	// before (want[i] bytes), as a client waiting for each answer does,
	// and returns the last answer followed by whatever came before EOF.
	exchange := func(t *testing.T, msgs [][]byte, want []int) []byte {
		t.Helper()
		c := dial(t)
		var last []byte
		for i, m := range msgs {
			if _, err := c.Write(m); err != nil {
				t.Fatalf("message %d: %v", i, err)
			}
			last = make([]byte, want[i])
			if _, err := io.ReadFull(c, last); err != nil {
				t.Fatalf("answer to message %d: %v (read %x)", i, err, last)
			}
		}
		rest, closed := readToClose(c, 10*time.Second)
		if !closed {
			t.Error("the connection was not closed after the answer")
		}
		return append(last, rest...)
	}

	t.Run("SOCKS4 request", func(t *testing.T) {
		got := exchange(t, [][]byte{{4, 1, 0, 80, 127, 0, 0, 1, 'u', 0}}, []int{8})
		if !bytes.Equal(got, []byte{0, 0x5B, 0, 0, 0, 0, 0, 0}) {
			t.Errorf("SOCKS4 CONNECT: %x, want the SOCKS4 rejection 00 5b", got)
		}
	})
	t.Run("HTTP request", func(t *testing.T) {
		c := dial(t)
		if _, err := io.WriteString(c, "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("HTTP to the SOCKS5 port: %v, want a 400", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "SOCKS5 port") {
			t.Errorf("HTTP to the SOCKS5 port: %d %q, want 400 naming the port", resp.StatusCode, body)
		}
	})
	t.Run("RFC 1929 version 2", func(t *testing.T) {
		got := exchange(t, [][]byte{{5, 1, 2}, {2, 1, 'u', 1, 'p'}}, []int{2, 2})
		if !bytes.Equal(got, []byte{1, 0xFF}) {
			t.Errorf("sub-negotiation version 2: %x, want a failure status 01 ff", got)
		}
	})
	t.Run("request version 4", func(t *testing.T) {
		got := exchange(t, [][]byte{{5, 1, 0}, {4, 1, 0, 1, 127, 0, 0, 1, 0, 80}}, []int{2, 10})
		if len(got) < 2 || got[0] != 5 || got[1] != repGeneralFailure {
			t.Errorf("request VER 4 after the greeting: %x, want REP 0x01", got)
		}
	})
	t.Run("credentials still checked", func(t *testing.T) {
		got := exchange(t, [][]byte{{5, 1, 2}, {1, 1, 'u', 1, 'p'}, socksHello("", "", srv.Addr("admin"))[3:]}, []int{2, 2, 10})
		if got[1] != repNotAllowed {
			t.Errorf("a client authenticated with RFC 1929 asking for rotor: %x, want REP 0x02", got)
		}
	})
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, `"conn_id"`) && (strings.Contains(l, `"level":"warn"`) || strings.Contains(l, `"level":"error"`)) {
			t.Errorf("a client's protocol error was logged above debug: %s", l)
		}
	}
}
