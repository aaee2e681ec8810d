package gateway

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// echoProxy is an http upstream on 127.0.0.1:0 that answers every request
// with the status line answer makes of the request head it received (its
// lines joined by spaces), then closes: a broken proxy echoing rotor's
// request, Proxy-Authorization included, in its reason phrase.
func echoProxy(t *testing.T, answer func(head []string) string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	wg.Add(1)
	go func() { // owner: the test; ends when ln is closed
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { // ends with the connection
				defer wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				var head []string
				for {
					l, err := br.ReadString('\n')
					if err != nil {
						return
					}
					if l = strings.TrimRight(l, "\r\n"); l == "" {
						break
					}
					head = append(head, l)
				}
				_, _ = c.Write([]byte("HTTP/1.1 " + answer(head) + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}()
		}
	}()
	return ln.Addr().String()
}

// authFirst moves the Proxy-Authorization line of head first, so that the
// token is within any bound put on the reason phrase.
func authFirst(head []string) []string {
	out := []string{}
	for _, l := range head {
		if strings.HasPrefix(strings.ToLower(l), "proxy-authorization:") {
			out = append([]string{l}, out...)
		} else {
			out = append(out, l)
		}
	}
	return out
}

// TestUpstreamEchoNotInDetail: an http upstream answering 407 with the
// request it received as its reason phrase put rotor's Proxy-Authorization
// (Basic Ym9iOkh0VHBQdw==, bob:HtTpPw) into the record's detail, the API,
// the state file and the log: the plain-HTTP path kept the reason phrase
// whole and unscrubbed (only the CONNECT path scrubbed its own secrets).
// Now no credential rotor sends leaves in any of them, in whatever order
// the echo has it, and a reason phrase of 4 KiB does not reach the log
// whole.
func TestUpstreamEchoNotInDetail(t *testing.T) {
	const user, pw = "bob", "HtTpPw"
	token := base64.StdEncoding.EncodeToString([]byte(user + ":" + pw))
	long := strings.Repeat("x", 4096)
	for _, tt := range []struct {
		name   string
		answer func(head []string) string
	}{
		{"the request echoed", func(h []string) string { return "407 " + strings.Join(h, " ") }},
		{"its Proxy-Authorization first", func(h []string) string { return "407 " + strings.Join(authFirst(h), " ") }},
		{"lower-case header", func(h []string) string { return "407 proxy-authorization: basic " + token }},
		{"the token alone", func([]string) string { return "407 denied " + token + " " + long }},
		{"the token unpadded", func([]string) string { return "407 " + strings.TrimRight(token, "=") }},
		{"a long reason", func([]string) string { return "407 " + long }},
	} {
		for _, tunnel := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/tunnel=%v", tt.name, tunnel), func(t *testing.T) {
				addr := echoProxy(t, tt.answer)
				state := filepath.Join(t.TempDir(), "state.json")
				srv, logs := startGateway(t, fmt.Sprintf("state_file = %q\n[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"100ms\"\n"+
					"[[upstream]]\nurl = \"http://%s:%s@%s\"\nname = \"up\"\n", state, user, pw, addr))
				resp, err := httpGet(t, srv.Addr("http"), "", "", "http://127.0.0.1:9/x", tunnel)
				if err != nil {
					t.Fatal(err)
				}
				client := fmt.Sprint(resp.Header) + bodyOf(resp)
				_, _, rec := doRequest(t, "http://"+srv.Addr("admin"), "GET", "/api/upstreams/up", "")
				_, _, list := doRequest(t, "http://"+srv.Addr("admin"), "GET", "/api/upstreams", "")
				if !strings.Contains(rec, "auth_rejected") {
					t.Fatalf("no auth_rejected in the record:\n%s", rec)
				}
				if err := srv.saveState(); err != nil {
					t.Fatal(err)
				}
				file, err := os.ReadFile(state)
				if err != nil {
					t.Fatal(err)
				}
				for where, out := range map[string]string{"client": client, "record": rec, "list": list, "log": logs.String(), "state file": string(file)} {
					for _, secret := range []string{pw, strings.TrimRight(token, "="), token[:12]} {
						if strings.Contains(out, secret) {
							t.Errorf("%s shows %q:\n%s", where, secret, out)
						}
					}
					if strings.Contains(out, long[:1024]) {
						t.Errorf("%s holds the whole reason phrase", where)
					}
				}
			})
		}
	}
}
