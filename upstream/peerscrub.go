package upstream

// Peer text is scrubbed where it enters rotor (issue: "probe xxxxxed").
// The final pass over a record's detail used to hide every secret of 3
// bytes or more wherever it stood, rotor's own words included: with an
// upstream user:pass, a passed probe read "probe xxxxxed" in the API and
// the state file, which tells the password to anyone who reads them. Now
// what a peer sent (a status line, a reason phrase, the words of a reply
// that is not HTTP, a TLS error) is scrubbed here, as it becomes an
// error's text, against every secret rotor holds and whatever its length
// (DialConfig.Scrub, plus the dialer's own password and Basic token), and
// the final pass hides only what it can tell is a secret (see the
// gateway's redactText).

import (
	"encoding/base64"
	"sort"
	"strings"

	"github.com/rotor-proxy/rotor/health"
)

// Every dialer NewDialer returns hides secrets in peer text for the
// prober (health.PeerScrubber).
var (
	_ health.PeerScrubber = (*connectDialer)(nil)
	_ health.PeerScrubber = (*socks5Dialer)(nil)
	_ health.PeerScrubber = (*directDialer)(nil)
)

// ScrubSecrets hides, in s, each non-empty secret (see SecretReplacer).
func ScrubSecrets(s string, secrets ...string) string {
	return NewSecretReplacer(secrets...).Replace(s)
}

// minAnywhere is the length from which a secret of letters and digits
// alone is hidden wherever it stands in peer text; a shorter one only
// where it is a whole run of letters and digits.
const minAnywhere = 8

// SecretReplacer hides secrets in peer text. A secret of at least
// minAnywhere bytes, or one holding a byte that is neither a letter nor a
// digit ("p@ss", a Basic token's '='), is hidden wherever it stands, the
// longest first, and a replacement is never matched again. A shorter one
// of letters and digits alone is hidden only where it is a whole run of
// them ("u:pw@h", "403 pw"): hidden inside words it rewrote the peer's
// text and told the secret ("500 Unable txxxxx cxxxxxnnect" for the
// password "o").
type SecretReplacer struct {
	anywhere *strings.Replacer
	words    map[string]bool
}

// NewSecretReplacer returns the replacer of secrets, built once for many
// texts, or nil (which hides nothing) when none is non-empty.
func NewSecretReplacer(secrets ...string) *SecretReplacer {
	var long []string
	words := map[string]bool{}
	seen := make(map[string]bool, len(secrets))
	for _, sec := range secrets {
		switch {
		case sec == "" || seen[sec]:
		case len(sec) < minAnywhere && alnumOnly(sec):
			words[sec] = true
		default:
			long = append(long, sec)
		}
		seen[sec] = true
	}
	if len(long) == 0 && len(words) == 0 {
		return nil
	}
	sr := &SecretReplacer{}
	if len(words) > 0 {
		sr.words = words
	}
	if len(long) > 0 {
		// strings.Replacer tries its pairs in argument order at each
		// place: the longest first, so a secret holding another is
		// hidden whole.
		sort.SliceStable(long, func(i, j int) bool { return len(long[i]) > len(long[j]) })
		pairs := make([]string, 0, 2*len(long))
		for _, sec := range long {
			pairs = append(pairs, sec, hidden)
		}
		sr.anywhere = strings.NewReplacer(pairs...)
	}
	return sr
}

// Replace returns s with the secrets hidden.
func (sr *SecretReplacer) Replace(s string) string {
	if sr == nil {
		return s
	}
	if sr.anywhere != nil {
		s = sr.anywhere.Replace(s)
	}
	if sr.words == nil {
		return s
	}
	return hideRuns(s, isAlnumByte, 0, func(w string) bool { return sr.words[w] })
}

func alnumOnly(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isAlnumByte(s[i]) {
			return false
		}
	}
	return true
}

func isAlnumByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// ScrubPeer hides, in s, text a peer sent, the dialer's own credentials
// (password and Basic token, whatever their length) and then every
// secret DialConfig.Scrub knows. It neither bounds s nor hides header
// values: PeerText does that.
func (p *proxyDialer) ScrubPeer(s string) string {
	if p.hasAuth {
		token := base64.StdEncoding.EncodeToString([]byte(p.user + ":" + p.pass))
		s = ScrubSecrets(s, p.pass, token, strings.TrimRight(token, "="))
	}
	if p.cfg.Scrub != nil {
		s = p.cfg.Scrub(s)
	}
	return s
}

// peerText is PeerText of s scrubbed by ScrubPeer first: scrubbing
// before the cut leaves no start of a secret at the end of the text.
func (p *proxyDialer) peerText(s string) string { return PeerText(p.ScrubPeer(s)) }

// ScrubPeer is DialConfig.Scrub's (direct has no credentials of its own).
func (d *directDialer) ScrubPeer(s string) string {
	if d.cfg.Scrub != nil {
		s = d.cfg.Scrub(s)
	}
	return s
}

// scrubbedError is err with its text scrubbed (peer text in a TLS or
// parse error), still unwrapping to err for errors.Is and errors.As.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrubError returns err with its text through scrub, or err itself when
// scrub changes nothing.
func scrubError(err error, scrub func(string) string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if s := scrub(msg); s != msg {
		return &scrubbedError{msg: s, err: err}
	}
	return err
}

// PeerText bounds and cleans s as the package function does, after
// hiding every secret e's dialer knows (ScrubPeer): for text an upstream
// or a target sent through e that the gateway puts into a failure.
func (e *Endpoint) PeerText(s string) string {
	if e == nil {
		return PeerText(s)
	}
	if ps, ok := e.dialer.(health.PeerScrubber); ok {
		s = ps.ScrubPeer(s)
	}
	return PeerText(s)
}

// PeerError is err with its text through e's ScrubPeer (see PeerText),
// unwrapping to err.
func (e *Endpoint) PeerError(err error) error {
	if e == nil {
		return err
	}
	ps, ok := e.dialer.(health.PeerScrubber)
	if !ok {
		return err
	}
	return scrubError(err, ps.ScrubPeer)
}
