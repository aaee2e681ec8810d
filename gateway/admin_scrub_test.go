package gateway

import (
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
)

// TestAdminScrubsEncodedPasswords: a detail holding an upstream's password
// in a form rotor sends it (percent-encoded, the Basic token, padded or
// not) is scrubbed in the API as the plain password is. Bug: the API's
// filter knew the plain password only.
func TestAdminScrubsEncodedPasswords(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	e := f.srv.pool.Lookup("dc-1")
	token := base64.StdEncoding.EncodeToString([]byte("alice:" + canary))
	for _, form := range []string{url.QueryEscape(canary), token, strings.TrimRight(token, "=")} {
		f.srv.tr.Disable(e.Record(), "the proxy said: "+form)
		_, _, body := f.do(t, "GET", "/api/upstreams/dc-1", "")
		if strings.Contains(body, form) {
			t.Errorf("GET /api/upstreams/dc-1 shows %q from a detail", form)
		}
		f.srv.tr.Enable(e.Record())
	}
}
