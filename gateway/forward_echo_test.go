package gateway

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestForwardEchoedUpstreamTokenNotRelayed: an upstream proxy that echoes
// rotor's Proxy-Authorization in an answer header does not hand rotor's
// upstream credentials to the client. Issue: answers were relayed
// unchanged, the echo included ("X-Echo: Basic dTY6…").
func TestForwardEchoedUpstreamTokenNotRelayed(t *testing.T) {
	const user, pass = "u6", "Upstr3am-s3cret"
	token := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	up := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		head, err := rt.readHead(br)
		if err != nil {
			return
		}
		auth := ""
		for _, l := range strings.Split(head, "\r\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "Proxy-Authorization") {
				auth = strings.TrimSpace(v)
			}
		}
		fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nX-Echo: %s\r\nX-Echo-Raw: %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", auth, strings.TrimPrefix(auth, "Basic "))
	})
	srv, _ := startGateway(t, "[pool]\nstart_eligible = true\nmax_attempts = 1\n[[upstream]]\nurl = \"http://"+user+":"+pass+"@"+up.Addr()+"\"\nname = \"up\"\n")
	resp, err := httpGet(t, srv.Addr("http"), "", "", "http://example.test/", false)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want 200", resp.StatusCode)
	}
	for k, vs := range resp.Header {
		for _, v := range vs {
			if strings.Contains(v, strings.TrimRight(token, "=")) || strings.Contains(v, pass) {
				t.Errorf("the client got rotor's upstream credentials in %s: %q", k, v)
			}
		}
	}
	if got := resp.Header.Get("X-Echo"); got != "Basic xxxxx" {
		t.Errorf("X-Echo %q, want the token hidden", got)
	}
}
