package gateway

// How deep a config file may nest, checked on its text before the
// decoder sees it. BurntSushi/toml takes time and memory quadratic in the
// nesting: a 16 KB file of 4,000 nested inline tables (x = {a={a=…}})
// took 2.5 s and 713 MB to decode, 100,000 of them (400 KB) ran out of
// memory; a table header of 20,000 dotted keys took 13.8 s. rotor decodes
// a config up to three times (the plain tree, the typed config, what is
// left after a bad value), at start, -check and every reload. Its own keys
// are at most 4 deep ([[upstream]] tags = […]), so a bound far above that
// refuses only such files, at once, at the line where the nesting goes
// past it.

import (
	"fmt"
	"strings"
)

// maxNesting is how many levels a value may sit under: each part of a
// table header or dotted key, each array, each [[table]] element.
// `[a.b]` then `c = [{d = 1}]` puts 1 five levels deep (a, b, c, the
// array, d).
const maxNesting = 32

// nestingError returns the error of the first place text nests deeper
// than maxNesting, or nil. Text it cannot read as TOML is left to the
// decoder, which reports the syntax error: the scan stops there, and the
// decoder does too.
func (c *Config) nestingError(text string) *ConfigError {
	n := nestScan{s: strings.TrimPrefix(text, "\ufeff"), deep: -1}
	n.file()
	if n.deep < 0 {
		return nil
	}
	line := 1 + strings.Count(n.s[:n.deep], "\n")
	return &ConfigError{File: c.path, Line: line, Msg: fmt.Sprintf(
		"nested more than %d levels deep (each table header or dotted key part, array and [[table]] is one); rotor's keys are at most 4 deep", maxNesting)}
}

// nestScan reads just enough TOML to measure nesting: keys, table
// headers, strings (whose brackets and '#' are text), comments, arrays and
// inline tables. It is linear in the text and recurses at most maxNesting
// deep (every level it enters is one more).
type nestScan struct {
	s    string
	i    int
	deep int // where the nesting first went past maxNesting, or -1
	max  int // the deepest level seen
}

// file scans the whole text: table headers and key = value lines. It
// returns at the end, at what it cannot read, or when too deep.
func (n *nestScan) file() {
	base := 0                  // the levels of the current table header
	elems := map[string]bool{} // the [[name]] headers seen, parts joined by NUL
	for {
		n.space(true)
		if n.i >= len(n.s) {
			return
		}
		if n.eat('[') {
			elem := n.eat('[') // [[name]]
			names, ok := n.key(true)
			if !ok || !n.at(len(names)) || !n.eat(']') || elem && !n.eat(']') {
				return
			}
			// Each part that names an array of tables ([[a]] before
			// [[a.b]] or [a.b]) is one level more: its element.
			level := len(names)
			for j := range names {
				path := strings.Join(names[:j+1], "\x00")
				if elem && j == len(names)-1 {
					elems[path] = true
				}
				if elems[path] {
					level++
				}
			}
			if !n.at(level) {
				return
			}
			base = level
		} else {
			names, ok := n.key(false)
			parts := len(names)
			if !ok || !n.at(base+parts) {
				return
			}
			n.space(false)
			if !n.eat('=') || !n.value(base+parts) {
				return
			}
		}
		n.space(false)
		if n.i < len(n.s) && n.s[n.i] != '#' && n.s[n.i] != '\n' && n.s[n.i] != '\r' {
			return // more on the line: a syntax error
		}
	}
}

// at records that the scan is level deep; false when that is too deep.
func (n *nestScan) at(level int) bool {
	n.max = max(n.max, level)
	if level > maxNesting {
		n.deep = n.i
		return false
	}
	return true
}

// key reads a dotted key ("a", "a.b", `"x.y".'z'`, spaces around the
// dots) and returns its parts: as written (a quoted part with its quotes
// and escapes, near enough to tell tables apart) when text is set, else
// only as many empty ones.
func (n *nestScan) key(text bool) ([]string, bool) {
	var parts []string
	for {
		n.space(false)
		start := n.i
		if n.i < len(n.s) && (n.s[n.i] == '"' || n.s[n.i] == '\'') {
			if !n.str() {
				return nil, false
			}
		} else {
			for n.i < len(n.s) && isBareKeyByte(n.s[n.i]) {
				n.i++
			}
			if n.i == start {
				return nil, false
			}
		}
		part := ""
		if text {
			part = n.s[start:n.i]
		}
		parts = append(parts, part)
		n.space(false)
		if !n.eat('.') {
			return parts, true
		}
	}
}

// value reads one value of a key or an array element at level.
func (n *nestScan) value(level int) bool {
	n.space(false)
	if n.i >= len(n.s) {
		return false
	}
	switch n.s[n.i] {
	case '"', '\'':
		return n.str()
	case '[':
		n.i++
		if !n.at(level + 1) {
			return false
		}
		for {
			n.space(true)
			if n.eat(']') {
				return true
			}
			if !n.value(level + 1) {
				return false
			}
			n.space(true)
			if !n.eat(',') {
				return n.eat(']')
			}
		}
	case '{':
		n.i++
		for {
			n.space(true) // TOML 1.1 lets an inline table span lines
			if n.eat('}') {
				return true
			}
			names, ok := n.key(false)
			parts := len(names)
			if !ok || !n.at(level+parts) {
				return false
			}
			n.space(false)
			if !n.eat('=') || !n.value(level+parts) {
				return false
			}
			n.space(true)
			if !n.eat(',') {
				return n.eat('}')
			}
		}
	}
	// A number, boolean or date ("1979-05-27 07:32:00" holds a space):
	// up to what ends a value.
	start := n.i
	for n.i < len(n.s) && !strings.ContainsRune(",]}#\r\n", rune(n.s[n.i])) {
		n.i++
	}
	return n.i > start
}

// str reads a string of any of the four kinds; n.s[n.i] is its quote.
func (n *nestScan) str() bool {
	q := n.s[n.i]
	if delim := strings.Repeat(string(q), 3); strings.HasPrefix(n.s[n.i:], delim) {
		n.i += 3
		for n.i < len(n.s) {
			switch {
			case q == '"' && n.s[n.i] == '\\':
				n.i += 2 // an escape, or a line-ending backslash
			case strings.HasPrefix(n.s[n.i:], delim):
				n.i += 3
				// Up to two quotes before the closing three are text.
				for k := 0; k < 2 && n.i < len(n.s) && n.s[n.i] == q; k++ {
					n.i++
				}
				return true
			default:
				n.i++
			}
		}
		return false
	}
	for n.i++; n.i < len(n.s); {
		switch c := n.s[n.i]; {
		case c == '\n':
			return false
		case q == '"' && c == '\\':
			n.i += 2
		case c == q:
			n.i++
			return true
		default:
			n.i++
		}
	}
	return false
}

// space skips blanks and, with lines set, line breaks and comments too.
// Without it, a comment is left for the caller: it ends the line.
func (n *nestScan) space(lines bool) {
	for n.i < len(n.s) {
		switch n.s[n.i] {
		case ' ', '\t':
			n.i++
		case '\n', '\r':
			if !lines {
				return
			}
			n.i++
		case '#':
			if !lines {
				return
			}
			if end := strings.IndexByte(n.s[n.i:], '\n'); end >= 0 {
				n.i += end
			} else {
				n.i = len(n.s)
			}
		default:
			return
		}
	}
}

// eat consumes b when it is next.
func (n *nestScan) eat(b byte) bool {
	if n.i < len(n.s) && n.s[n.i] == b {
		n.i++
		return true
	}
	return false
}

func isBareKeyByte(b byte) bool {
	return 'A' <= b && b <= 'Z' || 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || b == '_' || b == '-'
}
