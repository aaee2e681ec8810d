package gateway

// Redaction (issue 7, STYLE rule 51): passwords from the config, upstream
// URLs and client credentials never reach logs, errors, the admin API,
// metrics labels or panics. This file is the one place that knows how to
// hide them in text rotor did not build itself (parser messages, dial
// errors, panic values). Upstream URLs that did parse go through
// upstream.Redact; everything else goes through redactURL or redactText.

import (
	"net/url"
	"strings"
)

// redacted replaces a hidden secret; it matches upstream.Redact.
const redacted = "xxxxx"

// minSecretLen is the shortest explicit secret redactText replaces: a one-
// or two-letter password would shred every message it appears in (and is
// no secret worth the name). URL passwords are hidden whatever their length.
const minSecretLen = 3

// redactURL hides the password of one upstream URL as the user wrote it,
// whether or not it parses: "socks5://u:pw@h:1" → "socks5://u:xxxxx@h:1".
// It also covers the seller formats rotor accepts in list files, because a
// user pastes those into [[upstream]] url as well:
//
//	user:pass@host:port     → xxxxx@host:port
//	host:port:user:pass     → host:port:xxxxx (also after scheme://)
//
// A string with none of these shapes is returned unchanged.
func redactURL(raw string) string {
	if i := strings.Index(raw, "://"); i >= 0 {
		return raw[:i+3] + redactAuthority(raw[i+3:])
	}
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		return redacted + raw[at:]
	}
	return redactHostPortUserPass(raw)
}

// redactText hides, anywhere in s, the password of every URL with
// userinfo (scheme://user:pass@host) and every occurrence of each secret
// of at least minSecretLen bytes, raw and percent-encoded as in a URL's
// userinfo. Pass the secrets known to the caller (the client and upstream
// passwords, the admin token) when s may echo them outside a URL.
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
		b.WriteString(redactAuthority(rest[:end]))
		rest = rest[end:]
	}
	out := b.String()
	for _, sec := range secrets {
		if len(sec) < minSecretLen {
			continue
		}
		out = strings.ReplaceAll(out, sec, redacted)
		if enc := strings.TrimPrefix(url.UserPassword("", sec).String(), ":"); enc != sec {
			out = strings.ReplaceAll(out, enc, redacted)
		}
	}
	return out
}

// redactAuthority hides the password in the userinfo of s, the text after
// "scheme://". The userinfo ends at the last '@' before the path, like
// net/url reads it, so a password that itself holds '@' is hidden whole.
func redactAuthority(s string) string {
	end := strings.IndexAny(s, "/?#")
	if end < 0 {
		end = len(s)
	}
	at := strings.LastIndex(s[:end], "@")
	if at < 0 {
		// scheme://host:port:user:pass, a seller line behind a scheme.
		return redactHostPortUserPass(s[:end]) + s[end:]
	}
	user, _, hasPass := strings.Cut(s[:at], ":")
	if !hasPass {
		return s // a user name alone is not secret (STYLE rule 51)
	}
	return user + ":" + redacted + s[at:]
}

// redactHostPortUserPass hides what follows host:port in the
// host:port:user:pass seller format. IPv6 hosts are bracketed there.
func redactHostPortUserPass(s string) string {
	hostEnd := 0
	if strings.HasPrefix(s, "[") {
		hostEnd = strings.Index(s, "]")
		if hostEnd < 0 {
			return s
		}
		hostEnd++
	} else if hostEnd = strings.Index(s, ":"); hostEnd < 0 {
		return s
	}
	if hostEnd >= len(s) || s[hostEnd] != ':' {
		return s
	}
	port := strings.Index(s[hostEnd+1:], ":")
	if port < 0 {
		return s // plain host:port
	}
	return s[:hostEnd+1+port+1] + redacted
}
