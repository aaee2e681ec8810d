package upstream

// webServerHint is the note a CONNECT answer gets when it is what a plain
// web server, not a proxy, answers to CONNECT: 404, 405 or 501 with no
// X-Squid-Error (squid and tinyproxy refuse a CONNECT they will not serve
// with 403, see UPSTREAM-SIGNALS.md). Issue: a web server configured as
// an http:// upstream passes an http:// probe.url (the forwarded GET is
// answered by the web server itself, 200) and is admitted, then every
// CONNECT through it cools it, and it flaps. No general check tells such
// a page from the probe target's (probe.expect_body does, see README);
// the note at least names the likely cause in the record's detail.
func (e *ConnectStatusError) webServerHint() string {
	if e.Plain || e.SquidError != "" {
		return ""
	}
	switch e.StatusCode {
	case 404, 405, 501:
		return " (a web server's answer to CONNECT: is this upstream a proxy? " +
			"set probe.expect_body so that a probe answered by it fails)"
	}
	return ""
}
