package gateway

// Redaction (issue 7, STYLE rule 51): passwords from the config, upstream
// URLs and client credentials never reach logs, errors, the admin API,
// metrics labels or panics. This file is the one place that knows how to
// hide them in text rotor did not build itself (parser messages, dial
// errors, panic values, a record's details). Upstream URLs that did parse
// go through upstream.Redact; everything else goes through redactURL,
// redactText or detailScrubber.

import (
	"encoding/base64"
	"net"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/rotor-proxy/rotor/upstream"
)

// redacted replaces a hidden secret; it matches upstream.Redact.
const redacted = "xxxxx"

// minSecretLen is the shortest explicit secret redactText replaces, and
// only as a whole word: the final pass runs over rotor's own words too,
// and a short password hidden wherever it stands rewrote them ("probe
// passed" read "probe xxxxxed" with the password "pass", which told it
// to every reader of the API). Shorter secrets are hidden where peer text
// enters rotor (scrubPeer, upstream.ScrubPeer), as whole words.
// URL passwords, header values and Basic tokens are hidden whatever
// their length.
const minSecretLen = 8

// finalPassHides reports whether the final pass hides secret sec as a
// whole word: one of at least minSecretLen bytes that is not a word of
// letters alone. A password such as "password", "operator" or "eligible"
// is a word rotor writes itself ("username/password rejected", "enabled
// by operator"): hiding it there told it to every reader of the API. Such
// a secret is hidden where peer text enters rotor, like a short one.
func finalPassHides(sec string) bool {
	if len(sec) < minSecretLen {
		return false
	}
	for i := 0; i < len(sec); i++ {
		if c := sec[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z') {
			return true
		}
	}
	return false
}

// minCutLen is the shortest start of a secret hideCutSecret hides at the
// end of a cut text.
const minCutLen = 4

// redactURL hides the password of one upstream URL as the user wrote it,
// whether or not it parses: "socks5://u:pw@h:1" → "socks5://u:xxxxx@h:1".
// It also covers the seller formats rotor accepts in list files, because a
// user pastes those into [[upstream]] url as well:
//
//	user:pass@host:port     → xxxxx@host:port
//	host:port:user:pass     → host:port:xxxxx (also after scheme://)
//
// The password may hold any character ('#', '?', '/', '@', ':', spaces,
// broken percent-escapes, quotes): only what cannot be part of it is kept,
// the scheme, the user name before the first ':' and a host:port that
// follows the last '@' (see redactAuthority).
func redactURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 && isScheme(raw[:i]) {
		return raw[:i+3] + redactAuthority(raw[i+3:], true)
	}
	return redactAuthority(raw, false)
}

// isScheme reports whether s is a URL scheme (RFC 3986 section 3.1):
// "user:pw://" is not one, so a password holding "://" stays hidden.
func isScheme(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return false
		}
	}
	return true
}

// redactText hides, anywhere in s, the password of every URL with
// userinfo (scheme://user:pass@host), each secret of at least
// minSecretLen bytes where it stands as a whole word (wholeWords), raw
// and percent-encoded as in a URL's userinfo, and what
// upstream.HideCredentials finds without knowing a secret: Authorization
// and Proxy-Authorization header values, base64 user:password tokens. Pass the secrets known to the caller (the client
// and upstream passwords, the admin token) when s may echo them outside a
// URL. A URL in s is taken to end at white space, so a password holding a
// space is only hidden when it is passed as a secret: callers holding the
// raw URL use redactURL on it instead.
func redactText(s string, secrets ...string) string {
	var b strings.Builder
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			b.WriteString(rest)
			break
		}
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
		// The URL runs to the next white space. Quotes do not end it: a
		// %q-quoted password may hold an escaped quote before its '@'.
		end := strings.IndexAny(rest, " \t\r\n")
		if end < 0 {
			end = len(rest)
		}
		b.WriteString(redactAuthority(rest[:end], true))
		rest = rest[end:]
	}
	out := b.String()
	for _, sec := range secrets {
		if !finalPassHides(sec) {
			continue
		}
		out = replaceWords(out, sec)
		if enc := strings.TrimPrefix(url.UserPassword("", sec).String(), ":"); enc != sec {
			out = replaceWords(out, enc)
		}
	}
	return upstream.HideCredentials(out)
}

// replaceWords replaces with redacted each occurrence of sec in s that
// stands as a whole word: an end of sec that is a letter, digit or '_'
// must not touch another one in s.
func replaceWords(s, sec string) string {
	var b strings.Builder
	last, from := 0, 0
	for {
		i := strings.Index(s[from:], sec)
		if i < 0 {
			break
		}
		i += from
		j := i + len(sec)
		if (i == 0 || !isWordByte(sec[0]) || !isWordByte(s[i-1])) &&
			(j == len(s) || !isWordByte(sec[len(sec)-1]) || !isWordByte(s[j])) {
			b.WriteString(s[last:i])
			b.WriteString(redacted)
			last, from = j, j
			continue
		}
		from = i + 1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isWordByte(c byte) bool { return isAlnum(c) || c == '_' }

// userinfoSecrets are the forms in which rotor sends the password of ui
// to an upstream, or writes it: as it is (RFC 1929 sends it raw),
// percent-encoded (in a URL's userinfo, a query or a path), and in the
// Basic token of user:password (RFC 7617; padded and not), the last two.
// None when ui holds no password.
func userinfoSecrets(ui *url.Userinfo) []string {
	if ui == nil {
		return nil
	}
	pw, ok := ui.Password()
	if !ok || pw == "" {
		return nil
	}
	token := base64.StdEncoding.EncodeToString([]byte(ui.Username() + ":" + pw))
	return []string{pw, url.QueryEscape(pw), url.PathEscape(pw), strings.TrimPrefix(url.UserPassword("", pw).String(), ":"),
		token, strings.TrimRight(token, "=")}
}

// detailScrubber returns the filter for the details of the record of an
// upstream whose credentials are ui (nil: none), before they leave the
// process (admin API, state file). Details come from errors, which carry
// text the upstream sent (a reason phrase that echoes rotor's request):
// the filter hides ui's Basic token (padded or not) wherever it stands,
// ui's password in every other form rotor sends it (userinfoSecrets) as a
// whole word of at least minSecretLen bytes (rotor's own words are never
// rewritten: shorter ones are hidden where peer text enters), every
// header value and token redactText finds, and the start of a secret at
// the end of a detail that health cut to its bound ("…"), whose rest was
// cut off.
func detailScrubber(ui *url.Userinfo) func(string) string {
	secrets := userinfoSecrets(ui)
	var tokens []string // the Basic token: base64 of user:password, no word of rotor's
	if len(secrets) >= 2 {
		tokens = secrets[len(secrets)-2:]
	}
	return func(s string) string {
		for _, tok := range tokens {
			if len(tok) >= minSecretLen {
				s = strings.ReplaceAll(s, tok, redacted)
			}
		}
		return hideCutSecret(redactText(s, secrets...), secrets)
	}
}

// hideCutSecret hides, when s ends with "…" (a cut), a start of at
// least minCutLen bytes of one of secrets of at least minSecretLen bytes
// that s ends with before it, where it starts a word (as replaceWords).
func hideCutSecret(s string, secrets []string) string {
	body, ok := strings.CutSuffix(s, "…")
	if !ok {
		return s
	}
	for _, sec := range secrets {
		if !finalPassHides(sec) {
			continue
		}
		for k := len(sec) - 1; k >= minCutLen; k-- {
			i := len(body) - k
			if strings.HasSuffix(body, sec[:k]) && (i == 0 || !isWordByte(sec[0]) || !isWordByte(body[i-1])) {
				return body[:i] + redacted + "…"
			}
		}
	}
	return s
}

// peerSecrets returns the replacer that hides, in peer text and in
// client-supplied details, every secret rotor holds under cfg (a short
// one where it is a whole word: upstream.SecretReplacer): the password of each upstream of the endpoint lists eps in
// every form rotor sends it (userinfoSecrets), each [[client]] password
// and the Basic token of its user:password (what a client sends in
// Proxy-Authorization, which an upstream or a target may echo), and the
// admin token. nil when there is none.
func peerSecrets(cfg *Config, eps ...[]*upstream.Endpoint) *upstream.SecretReplacer {
	var secrets []string
	for _, list := range eps {
		for _, e := range list {
			if e.URL != nil {
				secrets = append(secrets, userinfoSecrets(e.URL.User)...)
			}
		}
	}
	if cfg != nil {
		for _, c := range cfg.Clients {
			if c.Password != "" {
				secrets = append(secrets, userinfoSecrets(url.UserPassword(c.Username, c.Password))...)
			}
		}
		if tok := cfg.Listen.AdminToken; tok != "" {
			secrets = append(secrets, tok, url.QueryEscape(tok))
		}
	}
	return upstream.NewSecretReplacer(secrets...)
}

// scrubPeer hides every secret rotor holds (peerSecrets of the config in
// force) in text (a short one where it is a whole word): text a peer sent, at the place it
// enters rotor (the dialers' DialConfig.Scrub, a target's status line),
// and the details clients and operators give the admin API. rotor's own
// words never go through it.
func (s *Server) scrubPeer(text string) string { return s.peerSecrets.scrub(text) }

// secretScrubber holds the peerSecrets of the config in force; apply
// replaces it. The zero value hides nothing.
type secretScrubber struct {
	r atomic.Pointer[upstream.SecretReplacer]
}

// set installs r (nil: nothing to hide).
func (sc *secretScrubber) set(r *upstream.SecretReplacer) { sc.r.Store(r) }

func (sc *secretScrubber) scrub(text string) string {
	return sc.r.Load().Replace(text) // nil hides nothing
}

// redactAuthority hides the password in s, the text after "scheme://" (or
// a whole scheme-less string). keepUser keeps the user name of a
// user:pass@ userinfo, which is no secret (STYLE rule 51).
//
// The userinfo ends at the LAST '@' of s, not at the first '/', '?' or
// '#': net/url would cut a password holding one of those into a path,
// query or fragment ("u:Hash#Secret9@h:1" has the host "u:Hash" for it),
// and then both halves are secret. What follows that '@' is kept only when
// it starts with host:port: otherwise the user forgot the host and it is
// the end of the password; or with a host that cannot be a piece of a
// password, an IP address or a dotted name (hostLen): a URL missing its
// port shows its host. Text that reads both as userinfo and as the
// host:port:user:pass seller format ("u:12:34@h:1") is hidden whole:
// either reading may be the user's, and each would show a part of the
// other's password. Without '@' or seller shape, a "port" that is not one
// is hidden: "u:pw" is a password without its host.
func redactAuthority(s string, keepUser bool) string {
	at := strings.LastIndex(s, "@")
	creds := sellerCreds(s)
	switch {
	case at >= 0 && creds >= 0:
		return redacted
	case at >= 0:
		host := s[at:]
		if hostPortLen(s[at+1:], false) == 0 && hostLen(s[at+1:]) == 0 {
			host = "@" + redacted
		}
		user, _, hasPass := strings.Cut(s[:at], ":")
		switch {
		case !keepUser:
			return redacted + host
		case !hasPass:
			return s[:at] + host // a user name alone is not secret (STYLE rule 51)
		}
		return user + ":" + redacted + host
	case creds >= 0:
		// What follows the port is user:pass, and the password runs to
		// the end: it may hold '/', so nothing after it is kept.
		return s[:creds] + redacted
	}
	host := strings.IndexAny(s, ":/?#")
	if host < 0 || s[host] != ':' || hostPortLen(s, true) > 0 {
		return s
	}
	return s[:host+1] + redacted
}

// hostPortLen returns the length of the host:port s starts with, or 0: a
// host name or IP ([v6] bracketed), ':' and a port, ending s or followed
// by '/' or punctuation that ends a URL quoted in a message. '#' and '?'
// do not end it: they are more likely in a password than after a proxy's
// port. The port is a number of up to five digits when numeric is set
// (the text may be user:password), else letters and digits: after an '@'
// a wrong port is still shown, it is no secret.
func hostPortLen(s string, numeric bool) int {
	i := 0
	if strings.HasPrefix(s, "[") {
		i = strings.IndexByte(s, ']') + 1
		if i <= 2 {
			return 0
		}
	} else {
		for i < len(s) && (isAlnum(s[i]) || s[i] == '.' || s[i] == '-' || s[i] == '_') {
			i++
		}
	}
	if i == 0 || i >= len(s) || s[i] != ':' {
		return 0
	}
	j := i + 1
	for j < len(s) && isAlnum(s[j]) {
		j++
	}
	if j == i+1 || j < len(s) && !strings.ContainsRune("/\"'):,;]>", rune(s[j])) {
		return 0
	}
	if numeric && (j-i-1 > 5 || strings.Trim(s[i+1:j], "0123456789") != "") {
		return 0
	}
	return j
}

// hostLen returns the length of the host s starts with when it has no
// port, or an empty one ("h:"), or 0. The host is an IP address (IPv6
// bracketed), "localhost" or a DNS name with a dot, ending s or followed
// by what hostPortLen accepts after a port. A single word ("Lk4g") is not
// taken for a host: after the last '@' it is more likely the end of a
// password holding '@' whose URL lost its host.
func hostLen(s string) int {
	const after = "/\"'),;]>"
	var n int
	if strings.HasPrefix(s, "[") {
		n = strings.IndexByte(s, ']') + 1
		if n <= 2 || net.ParseIP(s[1:n-1]) == nil {
			return 0
		}
	} else {
		if n = strings.IndexAny(s, ":"+after); n < 0 {
			n = len(s)
		}
		if !isHostName(s[:n]) {
			return 0
		}
	}
	if n < len(s) && s[n] == ':' {
		n++ // an empty port
	}
	if n < len(s) && !strings.ContainsRune(after, rune(s[n])) {
		return 0
	}
	return n
}

// isHostName reports whether h is "localhost", an IPv4 address or a
// dotted DNS name.
func isHostName(h string) bool {
	if h == "localhost" || net.ParseIP(h) != nil && !strings.Contains(h, ":") {
		return true
	}
	labels := strings.Split(h, ".")
	if len(labels) < 2 || strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return false // one word, or numeric but no IPv4 address ("1.2.3.999")
	}
	for _, l := range labels {
		if l == "" || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			if !isAlnum(l[i]) && l[i] != '-' && l[i] != '_' {
				return false
			}
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// sellerCreds returns where user:pass starts when s begins like the
// host:port:user:pass seller format (IPv6 hosts bracketed, a numeric
// port, a non-empty rest), or -1.
func sellerCreds(s string) int {
	hostEnd := 0
	if strings.HasPrefix(s, "[") {
		hostEnd = strings.Index(s, "]")
		if hostEnd < 0 {
			return -1
		}
		hostEnd++
	} else if hostEnd = strings.Index(s, ":"); hostEnd < 0 {
		return -1
	}
	if hostEnd >= len(s) || s[hostEnd] != ':' {
		return -1
	}
	port := strings.Index(s[hostEnd+1:], ":")
	if port <= 0 || strings.Trim(s[hostEnd+1:hostEnd+1+port], "0123456789") != "" {
		return -1 // plain host:port, user:pass@host, or no port at all
	}
	if creds := hostEnd + 1 + port + 1; creds < len(s) {
		return creds
	}
	return -1
}
