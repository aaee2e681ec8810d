package upstream

import "testing"

// TestRequestHostKey: the host per-target cooldowns and bans are keyed by
// is lower case without a name's final dot, so a ban reported for
// h.example (admin /report stores it so) holds for "H.Example.:443" too.
// Bug: the dotted form was a host of its own.
func TestRequestHostKey(t *testing.T) {
	for addr, want := range map[string]string{
		"H.Example.:443":  "h.example",
		"h.example:443":   "h.example",
		"127.0.0.1:80":    "127.0.0.1",
		"[::1]:443":       "::1",
		"[FE80::1]:443":   "fe80::1",
		"h.example..:443": "h.example.",
	} {
		if got := (Request{Addr: addr}).Host(); got != want {
			t.Errorf("Request{%q}.Host() = %q, want %q", addr, got, want)
		}
	}
}
