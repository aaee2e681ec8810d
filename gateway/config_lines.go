package gateway

import (
	"errors"
	"strings"

	"github.com/BurntSushi/toml"
)

// lineIndex maps TOML keys and table headers to the line they are on, so
// that errors found after decoding (unknown keys, cross-field checks) still
// point at a line. It is a best-effort scan of the text, not a parser: the
// decoder has already accepted the syntax.
type lineIndex struct {
	keys   map[string]int // "table.key" (array tables without index) → first line
	tables map[string]int // "table" → first header line
	arrays map[string][]int
}

func indexLines(text string) lineIndex {
	ix := lineIndex{keys: map[string]int{}, tables: map[string]int{}, arrays: map[string][]int{}}
	table := ""
	for i, raw := range strings.Split(text, "\n") {
		n := i + 1
		line := strings.TrimSpace(raw)
		if line == "" || line[0] == '#' {
			continue
		}
		if strings.HasPrefix(line, "[[") {
			if end := strings.Index(line, "]]"); end > 0 {
				table = strings.TrimSpace(line[2:end])
				ix.arrays[table] = append(ix.arrays[table], n)
				if _, ok := ix.tables[table]; !ok {
					ix.tables[table] = n
				}
			}
			continue
		}
		if line[0] == '[' {
			if end := strings.Index(line, "]"); end > 0 {
				table = strings.TrimSpace(line[1:end])
				if _, ok := ix.tables[table]; !ok {
					ix.tables[table] = n
				}
			}
			continue
		}
		eq := strings.Index(line, "=")
		if eq <= 0 {
			continue
		}
		k := strings.Trim(strings.TrimSpace(line[:eq]), `"'`)
		full := k
		if table != "" {
			full = table + "." + k
		}
		if _, ok := ix.keys[full]; !ok {
			ix.keys[full] = n
		}
	}
	return ix
}

// key returns the line of k, falling back to its table's line, or 0.
func (ix lineIndex) key(k toml.Key) int {
	for j := len(k); j > 0; j-- {
		s := strings.Join(k[:j], ".")
		if n, ok := ix.keys[s]; ok {
			return n
		}
		if n, ok := ix.tables[s]; ok {
			return n
		}
	}
	return 0
}

// table returns the header line of the first of names that exists, else
// the first line of any key or sub-table under it ("[cooldown.refused]"
// alone for "cooldown"), or 0. It scans in line order, not map order, so
// the answer does not change from run to run.
func (ix lineIndex) table(names ...string) int {
	for _, t := range names {
		if n, ok := ix.tables[t]; ok {
			return n
		}
		first := 0
		for _, m := range []map[string]int{ix.keys, ix.tables} {
			for k, n := range m {
				if strings.HasPrefix(k, t+".") && (first == 0 || n < first) {
					first = n
				}
			}
		}
		if first > 0 {
			return first
		}
	}
	return 0
}

// arrayTable returns the header line of the i-th [[name]], or 0.
func (ix lineIndex) arrayTable(name string, i int) int {
	if l := ix.arrays[name]; i < len(l) {
		return l[i]
	}
	return 0
}

// configKeyer is an error about one config key, named dotted
// ("pool.max_attempts"): health.KeyError, which upstream and cluster
// return too.
type configKeyer interface {
	ConfigKey() string
}

// configUser is a cross-field error that also names the keys it read
// (health.KeyError.Uses).
type configUser interface {
	ConfigUses() []string
}

// keyErrors turns an error of a package's Validate into one ConfigError
// per problem (errors.Join trees are flattened), each at the line of the
// key it names, or at fallback when it names none. Messages go through
// redactText: a package's error may quote a URL the user wrote.
func (c *Config) keyErrors(err error, fallback int) ConfigErrors {
	var errs ConfigErrors
	for _, e := range leafErrors(err) {
		if c.usesBadValue(e) {
			continue
		}
		line := fallback
		var k configKeyer
		if errors.As(e, &k) {
			if l := c.lines.key(toml.Key(splitKey(k.ConfigKey()))); l > 0 {
				line = l
			}
		}
		errs = append(errs, ConfigError{File: c.path, Line: line, Msg: redactText(e.Error())})
	}
	return errs
}

// usesBadValue reports whether e is a cross-field check that read a key
// whose value was refused (c.bad): it compared with the default in its
// place, which would only mislead ("max must be >= base" for a base of
// "2x"). Only a key written in the file has a line to be bad.
func (c *Config) usesBadValue(e error) bool {
	var u configUser
	if !errors.As(e, &u) {
		return false
	}
	for _, k := range u.ConfigUses() {
		if n, ok := c.lines.keys[k]; ok && c.bad[n] {
			return true
		}
	}
	return false
}

// leafErrors flattens the errors.Join trees in err, in order.
func leafErrors(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, leafErrors(e)...)
		}
		return out
	}
	return []error{err}
}
