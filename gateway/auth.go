package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"strings"
)

// authenticator checks client credentials. Passwords are compared in
// constant time over fixed-size digests, so neither the length nor the
// content of a stored password leaks through timing; every configured
// client is compared so the user name does not leak either.
type authenticator struct {
	clients []clientDigest
}

type clientDigest struct {
	user [32]byte
	pass [32]byte
}

func newAuthenticator(clients []ClientConfig) *authenticator {
	a := &authenticator{}
	for _, c := range clients {
		a.clients = append(a.clients, clientDigest{user: sha256.Sum256([]byte(c.Username)), pass: sha256.Sum256([]byte(c.Password))})
	}
	return a
}

// required reports whether clients must authenticate.
func (a *authenticator) required() bool { return len(a.clients) > 0 }

// check reports whether user (the base name, without parameters) and pass
// match a configured client. With no clients configured, anything passes.
func (a *authenticator) check(user, pass string) bool {
	if len(a.clients) == 0 {
		return true
	}
	return a.checkDigest(user, sha256.Sum256([]byte(pass)))
}

// checkDigest is check for a password given by its digest.
func (a *authenticator) checkDigest(user string, pass [32]byte) bool {
	u := sha256.Sum256([]byte(user))
	ok := 0
	for _, c := range a.clients {
		ok |= subtle.ConstantTimeCompare(u[:], c.user[:]) & subtle.ConstantTimeCompare(pass[:], c.pass[:])
	}
	return ok == 1
}

// knownUser reports whether user (a base name) is a configured client's:
// a failed login logs the name only then. A client that swapped its
// username and password, or typed its password into the username field,
// sent a secret there (issue: "user":"Cl1entPw" at debug).
func (a *authenticator) knownUser(user string) bool {
	u := sha256.Sum256([]byte(user))
	ok := 0
	for _, c := range a.clients {
		ok |= subtle.ConstantTimeCompare(u[:], c.user[:])
	}
	return ok == 1
}

// loginUser is what a failed login's log line says of user: the name when
// it is a configured client's, "(unknown)" for another non-empty one.
func (a *authenticator) loginUser(user string) string {
	if user == "" || a.knownUser(user) {
		return user
	}
	return "(unknown)"
}

// paramsSyntax is the username syntax, for the client's 407.
const paramsSyntax = "<user>[-session-<id>][-tag-<tag>]..., ids and tags without '-'"

// maxUserPrefixes bounds the user names refusal tries before a '-' of
// the name (each costs a digest and a comparison with every client).
const maxUserPrefixes = 8

// refusal is the 407 reason for raw (the username as sent, "" for none)
// and pass, which check refused. It says nothing of which users exist
// beyond what the client's own password proves:
//   - raw's parameters did not parse (params.User is all of raw) and it
//     holds "-session-" or "-tag-": it says so, whoever the user;
//   - the password is right for the user raw's base name starts with
//     (up to a '-'), and the rest is what rotor could not read as
//     parameters ("scraper-sesion-a1", "scraper-session-"): it names that
//     user and what is wrong with the rest. Only a client that holds the
//     user's password learns that the user exists, which it knew.
//
// Otherwise it is "proxy authentication required" saying that no username
// was sent, or that the username or password is incorrect (not which).
func (a *authenticator) refusal(raw, pass string, params userParams) string {
	const bare = "proxy authentication required"
	if raw == "" || len(a.clients) == 0 {
		return bare + ": no username was sent; send the username and password rotor's operator gave you (Proxy-Authorization: Basic)"
	}
	pd := sha256.Sum256([]byte(pass))
	base := params.User
	for i, n := 0, 0; i < len(base) && n < maxUserPrefixes; i++ {
		if base[i] != '-' || i == 0 {
			continue
		}
		n++
		if !a.checkDigest(base[:i], pd) {
			continue
		}
		rest := base[i+1:]
		return fmt.Sprintf("%s (the password is right for user %q, but rotor cannot read %q after it as parameters: %s; want %s)",
			bare, base[:i], "-"+rest, paramProblem(rest), paramsSyntax)
	}
	if params.User == raw && (strings.Contains(raw, "-session-") || strings.Contains(raw, "-tag-")) {
		// The parameters did not parse, so the whole name was checked (a
		// uuid session id has '-' in it). Says nothing of the users.
		return bare + " (username parameters not understood: " + paramsSyntax + ")"
	}
	return bare + ": the username or password is incorrect"
}

// paramProblem says what in rest (the username after its user, without
// the first '-') is not a parameter rotor reads.
func paramProblem(rest string) string {
	parts := strings.Split(rest, "-")
	session := ""
	for i := 0; i < len(parts); i += 2 {
		switch k := parts[i]; {
		case k == "":
			return "it has an empty part (a '-' too many)"
		case k != "session" && k != "tag" && i > 0:
			return fmt.Sprintf("%q after %s-%s is not a parameter (an id or a tag cannot contain '-')", k, parts[i-2], parts[i-1])
		case k != "session" && k != "tag":
			return fmt.Sprintf("%q is not a parameter (session or tag)", k)
		case i+1 == len(parts) || parts[i+1] == "":
			return fmt.Sprintf("%s-<%s> is missing its value", k, map[string]string{"session": "id", "tag": "tag"}[k])
		case k == "session" && session != "":
			return fmt.Sprintf("session is given twice (%q and %q)", session, parts[i+1])
		case k == "session":
			session = parts[i+1]
		}
	}
	return "it is not parameters" // not reached for a rest parseUser refused
}

// userParams are the scraper controls carried in a proxy username:
// <user>[-session-<id>][-tag-<tag>]...
type userParams struct {
	User    string
	Session string
	Tags    []string
}

// parseUser splits a proxy username into the base user and its parameters.
// Unknown "-key-value" pairs stay part of the base user, so a user name
// that happens to contain dashes still authenticates. A name with two
// sessions (scraper-session-a1-session-b2) is not guessed at: it is taken
// whole as the user name, as any name whose parameters do not parse, which
// with [[client]] is refused with a 407 saying why (see refusal).
func parseUser(raw string) userParams {
	var p userParams
	parts := strings.Split(raw, "-")
	base := []string{}
	i := 0
	for i < len(parts) {
		if i+1 < len(parts) && (parts[i] == "session" || parts[i] == "tag") && len(base) > 0 && parts[i+1] != "" {
			if parts[i] == "session" {
				if p.Session != "" {
					return userParams{User: raw} // which one was meant?
				}
				p.Session = parts[i+1]
			} else {
				p.Tags = append(p.Tags, parts[i+1])
			}
			i += 2
			continue
		}
		if p.Session != "" || len(p.Tags) > 0 {
			// Text after parameters that is not a parameter: keep it all
			// as the user name rather than guess.
			return userParams{User: raw}
		}
		base = append(base, parts[i])
		i++
	}
	p.User = strings.Join(base, "-")
	return p
}
