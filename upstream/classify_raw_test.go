package upstream

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
)

// TestClassifyRawAnswer: peer text is scrubbed at entry against every
// secret rotor holds, whatever its length, and classification used to
// read the scrubbed text: with a password "1", squid's
// "ERR_CONNECT_FAIL 110" became "ERR_CONNECT_FAIL xxxxxxxxxx0" (a refusal,
// not a timeout), and with a secret "a" tinyproxy's "500 Unable to
// connect" no longer read so (upstream_error, cooling the upstream whole).
// Classification now reads the raw answer; only the texts are scrubbed.
func TestClassifyRawAnswer(t *testing.T) {
	for _, tt := range []struct {
		name, pass, scrub, answer string
		class                     health.Class
		code                      byte // TargetReplyCode, 0: not a target failure
		rejected                  bool // ErrRequestRejected
	}{
		{name: "squid errno 110", pass: "1", answer: "HTTP/1.1 503 Service Unavailable\r\nX-Squid-Error: ERR_CONNECT_FAIL 110\r\n\r\n",
			class: health.TargetTimeout, code: 6},
		{name: "squid errno 111", pass: "1", answer: "HTTP/1.1 503 Service Unavailable\r\nX-Squid-Error: ERR_CONNECT_FAIL 111\r\n\r\n",
			class: health.TargetUnreachable, code: 5},
		{name: "squid name, client secret", pass: "pw", scrub: "R", answer: "HTTP/1.1 503 Service Unavailable\r\nX-Squid-Error: ERR_DNS_FAIL 0\r\n\r\n",
			class: health.TargetUnreachable, code: 4},
		{name: "squid request error", pass: "I", answer: "HTTP/1.1 400 Bad Request\r\nX-Squid-Error: ERR_INVALID_URL 0\r\n\r\n",
			class: health.ClassNone, rejected: true},
		{name: "tinyproxy reason phrase", pass: "a", answer: "HTTP/1.0 500 Unable to connect\r\nServer: tinyproxy/1.11.1\r\n\r\n",
			class: health.TargetUnreachable, code: 5},
		{name: "status code", pass: "5", answer: "HTTP/1.1 504 Gateway Timeout\r\n\r\n",
			class: health.TargetTimeout, code: 6},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := answerProxy(t, tt.answer)
			u := &url.URL{Scheme: "http", Host: addr, User: url.UserPassword("u", tt.pass)}
			cfg := DialConfig{}
			if tt.scrub != "" {
				cfg.Scrub = func(s string) string { return ScrubSecrets(s, tt.scrub) }
			}
			d, err := NewDialer(u, cfg)
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.DialContext(context.Background(), "tcp", "target.example:443")
			if err == nil {
				c.Close()
				t.Fatal("the dial succeeded")
			}
			f := Classify(err, health.StageProxyHandshake)
			if f.Class != tt.class {
				t.Errorf("class = %s, want %s (%v)", f.Class, tt.class, err)
			}
			if got := errors.Is(f, ErrRequestRejected); got != tt.rejected {
				t.Errorf("request rejected = %v, want %v (%v)", got, tt.rejected, err)
			}
			if code, ok := TargetReplyCode(err); code != tt.code || ok != (tt.code != 0) {
				t.Errorf("TargetReplyCode = %d, %v; want %d", code, ok, tt.code)
			}
			// The text is still scrubbed, but for squid's own word.
			var ce *ConnectStatusError
			if !errors.As(err, &ce) {
				t.Fatalf("%v: not a *ConnectStatusError", err)
			}
			// A short secret is hidden where it is a whole word; inside
			// the peer's words ("Unable", "504") it stays, or hiding it
			// would tell it.
			for _, secret := range []string{tt.pass, tt.scrub} {
				if secret == "" {
					continue
				}
				for _, w := range strings.FieldsFunc(ce.Status, func(r rune) bool { return !isAlnumByte(byte(r)) || r > 127 }) {
					if w == secret {
						t.Errorf("status %q shows the secret %q as a word", ce.Status, secret)
					}
				}
			}
			if ce.Status != strings.TrimPrefix(strings.SplitN(tt.answer, "\r\n", 2)[0], "HTTP/1.1 ") &&
				ce.Status != strings.TrimPrefix(strings.SplitN(tt.answer, "\r\n", 2)[0], "HTTP/1.0 ") {
				t.Errorf("status %q: the peer's words were rewritten", ce.Status)
			}
		})
	}
}

// TestSquidWordUnscrubbed: an X-Squid-Error value that is squid's own
// word (ERR_NAME, an errno) stays as sent, whatever secret it holds; any
// other value is scrubbed.
func TestSquidWordUnscrubbed(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"ERR_CONNECT_FAIL 111", "ERR_CONNECT_FAIL 111"},
		{"ERR_DNS_FAIL", "ERR_DNS_FAIL"},
		{"ERR_CONNECT_FAIL 111 u:1", "ERR_CONNECT_FAIL 111 u:xxxxx"}, // "1" a word only after "u:"
		{"err_connect_fail 1", "err_connect_fail xxxxx"},
	} {
		if got := squidText(tt.in, func(s string) string { return ScrubSecrets(s, "1") }); got != tt.want {
			t.Errorf("squidText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
