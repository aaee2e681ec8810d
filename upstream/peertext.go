package upstream

// Text a peer sent (a proxy's status line, a reason phrase, the words of
// a reply that is not HTTP) goes into errors, and errors go into the
// record's detail (admin API, state file, fleet), the log and the
// client's 502. A broken or hostile proxy may echo rotor's request in
// it, Proxy-Authorization header and all (a fake one answered
// "407 <the request>"), and a target may echo what a proxy forwarded to
// it. So such text is bounded and every credential rotor sends is taken
// out of it, in whatever form it comes back.

import (
	"encoding/base64"
	"strings"
	"unicode/utf8"
)

// maxPeerText bounds peer text in an error: a reason phrase can be as
// long as the response head (1 MiB), and it would go whole into every
// log line about it.
const maxPeerText = 128

// hidden replaces a credential; it matches Redact.
const hidden = "xxxxx"

// PeerText bounds and cleans s, text a peer sent, before it goes into an
// error: each of secrets (of at least 3 bytes; the caller's password and
// Basic token) and every credential HideCredentials finds are replaced,
// then s is cut to maxPeerText bytes at a character boundary and its
// control bytes are replaced by '?'.
func PeerText(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 3 {
			s = strings.ReplaceAll(s, sec, hidden)
		}
	}
	s = HideCredentials(s)
	if len(s) > maxPeerText {
		n := maxPeerText
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s)
}

// HideCredentials replaces, in s, the value of every Authorization or
// Proxy-Authorization header it quotes (after its scheme word, "Basic"),
// up to the end of the line or to the first '"' that is not escaped (the
// end of a %q-quoted status), and every word that is the base64 of
// user:password, the Basic token of RFC 7617 (rotor's own, or any
// other), wherever it stands. It knows no password: callers that do
// replace it themselves (PeerText's secrets).
func HideCredentials(s string) string {
	s = hideAuthHeaders(s)
	return hideBasicTokens(s)
}

// hideAuthHeaders hides the header values of HideCredentials.
func hideAuthHeaders(s string) string {
	const name = "authorization:"
	var b strings.Builder
	for {
		i := indexFold(s, name)
		if i < 0 {
			if b.Len() == 0 {
				return s
			}
			b.WriteString(s)
			return b.String()
		}
		v := i + len(name)
		for v < len(s) && (s[v] == ' ' || s[v] == '\t') {
			v++
		}
		// Keep the scheme ("Basic ", "Bearer "): it is no secret, and
		// says what was there.
		w := v
		for w < len(s) && isLetter(s[w]) {
			w++
		}
		if w < len(s) && w > v && s[w] == ' ' {
			v = w + 1
		}
		if v < len(s) && s[v] == '"' {
			v++ // a quoted value: what the quotes hold
		}
		end := v
		for end < len(s) && s[end] != '\r' && s[end] != '\n' && !(s[end] == '"' && s[end-1] != '\\') {
			end++
		}
		b.WriteString(s[:v])
		if end > v {
			b.WriteString(hidden)
		}
		s = s[end:]
	}
}

// hideBasicTokens hides the base64 words of HideCredentials: runs of the
// base64 alphabets (standard and URL-safe), then any '=' padding, of at
// least 8 bytes that decode to printable text holding a ':'.
func hideBasicTokens(s string) string {
	return hideRuns(s, isBase64Byte, '=', func(w string) bool { return len(w) >= 8 && isCredentialToken(w) })
}

// hideRuns replaces with hidden each maximal run of bytes inRun in s (and
// of pad bytes right after it, when pad is not 0) for which hide is true.
func hideRuns(s string, inRun func(byte) bool, pad byte, hide func(string) bool) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		if !inRun(s[i]) {
			i++
			continue
		}
		j := i
		for j < len(s) && inRun(s[j]) {
			j++
		}
		for pad != 0 && j < len(s) && s[j] == pad {
			j++
		}
		if hide(s[i:j]) {
			b.WriteString(s[last:i])
			b.WriteString(hidden)
			last = j
		}
		i = j
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// isCredentialToken reports whether w decodes, in one of the base64
// alphabets, to printable text holding a ':' (user:password).
func isCredentialToken(w string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		d, err := enc.DecodeString(w)
		if err != nil || !strings.Contains(string(d), ":") || !utf8.Valid(d) {
			continue
		}
		printable := true
		for _, r := range string(d) {
			if r < 0x20 || r == 0x7f {
				printable = false
				break
			}
		}
		if printable {
			return true
		}
	}
	return false
}

// isBase64Byte reports whether c is in a base64 alphabet, padding aside.
func isBase64Byte(c byte) bool {
	return isLetter(c) || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '-' || c == '_'
}

func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// indexFold is strings.Index of the lower-case ASCII sub in s, case
// ignored, without a lower-cased copy of s.
func indexFold(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		j := 0
		for j < len(sub) && lower(s[i+j]) == sub[j] {
			j++
		}
		if j == len(sub) {
			return i
		}
	}
	return -1
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
