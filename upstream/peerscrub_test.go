package upstream

import (
	"bufio"
	"context"
	"encoding/base64"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// answerProxy accepts on 127.0.0.1:0, reads one request head and writes
// answer, then closes.
func answerProxy(t *testing.T, answer string) string {
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
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				_, _ = c.Write([]byte(answer))
			}()
		}
	}()
	return ln.Addr().String()
}

// TestConnectAnswerScrubbed: a CONNECT answer's status line went into the
// error with only the dialer's own password hidden, and that only from 3
// bytes on; a secret rotor holds elsewhere (another upstream's password,
// a client's) stayed. Now the status line, the X-Squid-Error value and an
// answer that is not HTTP go through ScrubPeer: the dialer's own
// password and Basic token whatever their length, then DialConfig.Scrub.
func TestConnectAnswerScrubbed(t *testing.T) {
	const own, other = "Pw", "oth3r"
	token := base64.StdEncoding.EncodeToString([]byte("u:" + own))
	scrub := func(s string) string { return strings.ReplaceAll(s, other, "xxxxx") }
	for _, tt := range []struct {
		name, answer string
		shown        bool // the text quotes the secrets' place ("u:xxxxx")
	}{
		{"status line", "HTTP/1.1 403 denied u:" + own + " " + other + " " + token + "\r\n\r\n", true},
		{"x-squid-error", "HTTP/1.1 503 No\r\nX-Squid-Error: ERR_X u:" + own + " " + other + "\r\n\r\n", true},
		// An answer that is not HTTP is quoted by its first bytes only.
		{"not HTTP", "SSH-2.0 u:" + own + " " + other + "\r\n\r\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := answerProxy(t, tt.answer)
			u := &url.URL{Scheme: "http", Host: addr, User: url.UserPassword("u", own)}
			d, err := NewDialer(u, DialConfig{Scrub: scrub})
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.DialContext(context.Background(), "tcp", "target.example:443")
			if err == nil {
				c.Close()
				t.Fatal("the dial succeeded")
			}
			msg := err.Error()
			if strings.Contains(msg, "u:"+own) || strings.Contains(msg, other) || strings.Contains(msg, token) || tt.shown && !strings.Contains(msg, "u:xxxxx") {
				t.Errorf("error %q: want every secret hidden", msg)
			}
		})
	}
}

// TestScrubSecrets: one pass, the longest secret first, and a
// replacement is never matched again.
func TestScrubSecrets(t *testing.T) {
	for _, tt := range []struct {
		in      string
		secrets []string
		want    string
	}{
		{"a pw b", []string{"pw"}, "a xxxxx b"},
		{"abcd", []string{"ab", "abcd"}, "xxxxx"},
		{"x y", []string{"x", "y"}, "xxxxx xxxxx"},
		{"none", []string{""}, "none"},
		{"none", nil, "none"},
	} {
		if got := ScrubSecrets(tt.in, tt.secrets...); got != tt.want {
			t.Errorf("ScrubSecrets(%q, %q) = %q, want %q", tt.in, tt.secrets, got, tt.want)
		}
	}
}

// TestSecretReplacerShortWords: a short secret of letters and digits is
// hidden in peer text only where it is a whole word. Issue: with an
// upstream password "o" tinyproxy's answer read "500 Unable txxxxx
// cxxxxxnnect" in the API, which told the password, and with "x" every
// other hidden secret grew to 25 x's.
func TestSecretReplacerShortWords(t *testing.T) {
	for _, tt := range []struct {
		secrets  []string
		in, want string
	}{
		{[]string{"o"}, "500 Unable to connect", "500 Unable to connect"},
		{[]string{"o"}, "403 denied u:o@h", "403 denied u:xxxxx@h"},
		{[]string{"x", "longsecret1"}, "a longsecret1 b", "a xxxxx b"},
		{[]string{"pw12"}, "echo pw12, not pw123", "echo xxxxx, not pw123"},
		{[]string{"p@ss"}, "sent p@ssword", "sent xxxxxword"}, // not letters and digits alone: anywhere
		{[]string{"longsecret1"}, "xlongsecret1y", "xxxxxxy"}, // long: anywhere
	} {
		r := NewSecretReplacer(tt.secrets...)
		got := r.Replace(tt.in)
		if got != tt.want {
			t.Errorf("%q with %q = %q, want %q", tt.in, tt.secrets, got, tt.want)
		}
		if again := r.Replace(got); again != got {
			t.Errorf("a second pass changed %q to %q", got, again)
		}
	}
	if got := (*SecretReplacer)(nil).Replace("a"); got != "a" {
		t.Errorf("nil replacer: %q", got)
	}
}
