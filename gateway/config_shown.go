package gateway

// How much of what the user wrote a config message shows. A key or value
// is echoed to name what is wrong ("unknown key …", "client … duplicates
// …"), but a file may hold a 10 MB key, and its message went out whole to
// the terminal of -check and to the log of every reload. Redaction comes
// first, always: a secret is hidden before anything is cut, so cutting
// never leaves a piece of it behind a redaction that no longer matches.

import "strings"

// maxShown is how many bytes of one key or value a message shows.
const maxShown = 100

// maxMsg is how many bytes of one message ConfigError prints, for any
// text not cut by shown (a decoder's or package's message quoting what it
// read, a path).
const maxMsg = 1 << 10

// shown is s as a message shows it: cut to maxShown bytes (at a rune
// boundary) and marked with "…" when longer. s must be redacted already.
func shown(s string) string {
	return clip(s, maxShown)
}

// clip cuts s to at most n bytes, marking the cut with "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// shownWords is s, a message rotor did not write (the decoder's), with
// each word longer than maxShown cut as shown cuts it: what such a
// message quotes of the file is one word when it is long (a key, a
// value). s must be redacted already.
func shownWords(s string) string {
	words := strings.Split(s, " ")
	for i, w := range words {
		words[i] = shown(w)
	}
	return strings.Join(words, " ")
}
