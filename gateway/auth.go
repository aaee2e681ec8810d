package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
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
	u := sha256.Sum256([]byte(user))
	p := sha256.Sum256([]byte(pass))
	ok := 0
	for _, c := range a.clients {
		ok |= subtle.ConstantTimeCompare(u[:], c.user[:]) & subtle.ConstantTimeCompare(p[:], c.pass[:])
	}
	return ok == 1
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
// that happens to contain dashes still authenticates.
func parseUser(raw string) userParams {
	var p userParams
	parts := strings.Split(raw, "-")
	base := []string{}
	i := 0
	for i < len(parts) {
		if i+1 < len(parts) && (parts[i] == "session" || parts[i] == "tag") && len(base) > 0 && parts[i+1] != "" {
			if parts[i] == "session" {
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
