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

// ScrubSecrets replaces, in s, every occurrence of each non-empty secret
// with "xxxxx", in one pass: at each place the longest secret that
// matches is taken, and a replacement is never matched again (a secret
// "x" does not grow the "xxxxx" of another).
func ScrubSecrets(s string, secrets ...string) string {
	r := NewSecretReplacer(secrets...)
	if r == nil {
		return s
	}
	return r.Replace(s)
}

// NewSecretReplacer returns the replacer of ScrubSecrets for secrets,
// built once for many texts, or nil when none is non-empty.
func NewSecretReplacer(secrets ...string) *strings.Replacer {
	uniq := make([]string, 0, len(secrets))
	seen := make(map[string]bool, len(secrets))
	for _, sec := range secrets {
		if sec != "" && !seen[sec] {
			seen[sec] = true
			uniq = append(uniq, sec)
		}
	}
	if len(uniq) == 0 {
		return nil
	}
	// strings.Replacer tries its pairs in argument order at each place:
	// the longest first, so a secret holding another is hidden whole.
	sort.SliceStable(uniq, func(i, j int) bool { return len(uniq[i]) > len(uniq[j]) })
	pairs := make([]string, 0, 2*len(uniq))
	for _, sec := range uniq {
		pairs = append(pairs, sec, hidden)
	}
	return strings.NewReplacer(pairs...)
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
