package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/rotor-proxy/rotor/upstream"
)

// keyError is a problem with one key of a [[table]] element, so that
// validate can point at that key's line rather than the element's header
// (key "": the header, for problems of several keys).
type keyError struct {
	key string
	err error
}

func (e *keyError) Error() string { return e.err.Error() }
func (e *keyError) Unwrap() error { return e.err }

// schemeTypo explains a URL that starts with a known scheme but lacks the
// "//" after its ':' or the ':' before its "//" (upstream.SchemeTypo,
// which list files share), nil for anything else; the URL is shown as
// written unless it may hold a password, which redactURL hides.
func schemeTypo(raw string) error {
	msg, asWritten, ok := upstream.SchemeTypo(raw)
	if !ok {
		return nil
	}
	written := raw
	if !asWritten {
		written = redactURL(raw)
	}
	return fmt.Errorf("upstream %q: %s", shown(written), msg)
}

// spec turns one [[upstream]] into a pool spec. Errors never carry the
// password, whatever it holds: an unparsable URL is shown through
// redactURL, never as written, and never quoted by net/url.
func (u UpstreamConfig) spec() (upstream.Spec, error) {
	bad := func(key, format string, a ...any) (upstream.Spec, error) {
		return upstream.Spec{}, &keyError{key: key, err: fmt.Errorf(format, a...)}
	}
	raw := strings.TrimSpace(u.URL)
	if raw == "" {
		return bad("url", "upstream: url is required")
	}
	rest, hasScheme := raw, false
	if i := strings.Index(raw, "://"); i >= 0 {
		rest, hasScheme = raw[i+3:], true
	}
	if sellerCreds(rest) >= 0 && !strings.Contains(rest, "@") {
		// host:port:user:pass (also behind a scheme), a list-file line
		// pasted here.
		return bad("url", "upstream %q: want scheme://user:pass@host:port (host:port:user:pass is a list-file format)", shown(redactURL(raw)))
	}
	if !hasScheme {
		if e := schemeTypo(raw); e != nil {
			return bad("url", "%v", e)
		}
		// Also user:pass@host:port: net/url would read it as scheme
		// "user" and may keep the password in what it shows.
		return bad("url", "upstream %q: want scheme://[user:pass@]host:port (socks5, http, https or direct)", shown(redactURL(raw)))
	}
	// net/url ends the userinfo at the first '/', '?' or '#', so a
	// password holding one would partly become the host
	// ("u:Hash#Secret9@h:1" has host "u:Hash") and partly a fragment.
	if at := strings.LastIndex(rest, "@"); at >= 0 && strings.ContainsAny(rest[:at], "/?#") {
		return bad("url", "upstream %q: '/', '?' or '#' before the '@': percent-encode them in the password (%%2F, %%3F, %%23)", shown(redactURL(raw)))
	}
	pu, err := url.Parse(raw)
	if err != nil {
		hint := ""
		if strings.Contains(raw, "@") {
			hint = "; percent-encode special characters in the password"
		}
		return bad("url", "upstream %q: invalid url (%s%s)", shown(redactURL(raw)), urlParseReason(err), hint)
	}
	if pu.Opaque != "" {
		// A seller line pasted as a URL ("user:pass@host:port") parses as
		// scheme "user" with an opaque rest that holds the password.
		return bad("url", "upstream %q: want scheme://[user:pass@]host:port (socks5, http, https or direct)", shown(upstream.Redact(pu)))
	}
	if err := upstream.CheckURL(pu); err != nil {
		// Shown as written (redacted), not as net/url read it: when the
		// URL parses in an unintended way, the password may be in what
		// it took for the host.
		return bad("url", "upstream %q: %v", shown(redactURL(raw)), err)
	}
	if u.PasswordEnv != "" {
		pw := os.Getenv(u.PasswordEnv)
		if pw == "" {
			return bad("password_env", "upstream %s: environment variable %s is empty or unset", shown(upstream.Redact(pu)), shown(u.PasswordEnv))
		}
		user := ""
		if pu.User != nil {
			user = pu.User.Username()
		}
		pu.User = url.UserPassword(user, pw)
		// What the URL's own password passed, the variable's must too
		// (socks5: RFC 1929 carries at most 255 bytes).
		if err := upstream.CheckURL(pu); err != nil {
			return bad("password_env", "upstream %s: with the password from %s: %v", upstream.Redact(pu), u.PasswordEnv, err)
		}
	}
	if u.Pipeline && pu.Scheme != "socks5" && pu.Scheme != "socks5h" {
		return bad("pipeline", "upstream %s: pipeline = true applies to socks5 upstreams only", shown(upstream.Redact(pu)))
	}
	return upstream.Spec{URL: pu, Name: u.Name, Disabled: u.Disabled, Tags: u.Tags, Weight: u.Weight, MaxConns: u.MaxConns, Rate: u.Rate, Pipeline: u.Pipeline}, nil
}

// urlParseReason is net/url's reason without what it quotes: it quotes
// the bad part of the input ("invalid port \":Hash\" after host"), which
// may be a piece of the password.
func urlParseReason(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return "not a URL"
	}
	s := ue.Err.Error()
	var b strings.Builder
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(strings.TrimRight(s[:i], " "))
		q, err := strconv.QuotedPrefix(s[i:])
		if err != nil {
			break // an unterminated quote: drop the rest
		}
		s = s[i+len(q):]
	}
	return strings.TrimPrefix(strings.TrimSpace(b.String()), "net/url: ")
}
