package gateway

// Decoding errors, reported FILE:LINE: key: message like every other
// config problem (-check, reload). BurntSushi/toml gives a line for syntax
// errors only (toml.ParseError); its type errors are plain text ("toml:
// line 5 (last key ...): incompatible types: ...") carrying the line of
// the LAST [[table]] element that holds the key, and it decodes an integer
// into a time.Duration as nanoseconds ("timeout = 5" is 5ns, and every
// probe fails). This file walks the decoded tree along the Go types to
// catch the second, and rewrites the decoder's texts for the first, so
// both come out as one clear line.

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

var durationType = reflect.TypeFor[time.Duration]()

// decodeTree decodes text a second time into plain maps: what each key
// holds as written. It fails only where the typed decode failed on syntax.
func decodeTree(text string) (map[string]any, error) {
	var tree map[string]any
	_, err := toml.Decode(text, &tree)
	return tree, err
}

// parseError formats an error of the typed decode that carries its line:
// a syntax error (tree is nil: the text does not parse at all), or a value
// the decoder could not convert, such as a bad duration string.
func (c *Config) parseError(pe toml.ParseError, tree map[string]any) ConfigError {
	msg := pe.Message
	if tree != nil && pe.LastKey != "" {
		key := splitKey(pe.LastKey)
		if s, ok := lookup(tree, key).(string); ok && keyType(reflect.TypeFor[Config](), key) == durationType {
			msg = fmt.Sprintf("invalid duration %q (want a duration string like \"5s\", \"500ms\" or \"1m30s\")", s)
		}
		msg = pe.LastKey + ": " + msg
	}
	return ConfigError{File: c.path, Line: pe.Position.Line, Msg: redactText(msg)}
}

// decodeErrRE matches the decoder's errors without a position field:
// `toml: line 5 (last key "upstream.tags"): incompatible types: ...`.
var decodeErrRE = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key ("(?:[^"\\]|\\.)*")\): (.*)$`)

// typeErrRE matches the two type mismatch texts of the decoder: groups 1
// and 4 are the Go type of the TOML value, 2 and 3 the destination. Their
// wording is pinned by TestConfigDecodeErrorsFileLine; text that no longer
// matches is still reported, only less clearly.
var typeErrRE = regexp.MustCompile(`^(?:incompatible types: TOML value has type (.+); destination has type (.+)|type mismatch for .+: expected (table) but found (.+))$`)

// decodeError formats an error of the typed decode that has no position
// field, and returns the key it is about ("" when unknown). The line is
// that of the key in the [[table]] element whose value is wrong, not the
// decoder's last one.
func (c *Config) decodeError(err error, tree map[string]any) (ConfigError, string) {
	m := decodeErrRE.FindStringSubmatch(err.Error())
	if m == nil {
		return ConfigError{File: c.path, Msg: redactText(strings.TrimPrefix(err.Error(), "toml: "))}, ""
	}
	keyStr, uerr := strconv.Unquote(m[2])
	if uerr != nil {
		keyStr = strings.Trim(m[2], `"`)
	}
	key := splitKey(keyStr)
	line, _ := strconv.Atoi(m[1])
	msg := m[3]
	got := ""
	if t := typeErrRE.FindStringSubmatch(msg); t != nil {
		want := t[2]
		got = t[1]
		if t[3] != "" {
			want, got = t[3], t[4]
		}
		msg = "want " + wantName(want) + ", got " + goTypeName(got)
	}
	if l := c.elemLineOf(tree, key, got); l > 0 {
		line = l
	} else if line == 0 {
		line = c.lines.key(toml.Key(key))
	}
	return ConfigError{File: c.path, Line: line, Msg: redactText(keyStr + ": " + msg)}, keyStr
}

// elemLineOf finds the line of key when its first part is a [[table]]:
// the first element whose value has the Go type got (the decoder stops at
// the first bad one, in file order). 0 when key is not in an array table.
func (c *Config) elemLineOf(tree map[string]any, key []string, got string) int {
	if len(key) < 2 {
		return 0
	}
	elems, ok := tree[key[0]].([]map[string]any)
	if !ok {
		return 0
	}
	for i, e := range elems {
		v := lookup(e, key[1:])
		if v != nil && (got == "" || fmtType(v) == got) {
			return c.elemKey(key[0], i, strings.Join(key[1:], "."))
		}
	}
	return 0
}

// durationErrors reports every key decoded into a time.Duration whose
// value is not a string: the contract's durations are Go duration
// strings, and the decoder would take an integer as nanoseconds. It also
// returns the keys reported, so the decoder's own error about the same
// key (a float) is not reported twice.
func (c *Config) durationErrors(tree map[string]any) (ConfigErrors, map[string]bool) {
	var errs ConfigErrors
	seen := map[string]bool{}
	var walk func(m map[string]any, t reflect.Type, prefix toml.Key, line func(toml.Key) int)
	check := func(key toml.Key, v any, t reflect.Type, line func(toml.Key) int) {
		switch {
		case t == durationType:
			if _, ok := v.(string); !ok {
				k := key.String()
				seen[k] = true
				errs = append(errs, ConfigError{File: c.path, Line: line(key),
					Msg: fmt.Sprintf("%s: want a duration string like \"5s\", got %s", k, describeValue(v))})
			}
		case t.Kind() == reflect.Struct:
			if sub, ok := v.(map[string]any); ok {
				walk(sub, t, key, line)
			}
		case t.Kind() == reflect.Slice && deref(t.Elem()).Kind() == reflect.Struct:
			elems, ok := v.([]map[string]any)
			if !ok {
				return
			}
			for i, e := range elems {
				elemLine := line
				if len(key) == 1 {
					name := key[0]
					elemLine = func(k toml.Key) int {
						return c.elemKey(name, i, strings.Join(k[1:], "."))
					}
				}
				walk(e, deref(t.Elem()), key, elemLine)
			}
		}
	}
	walk = func(m map[string]any, t reflect.Type, prefix toml.Key, line func(toml.Key) int) {
		for _, k := range sortedKeys(m) {
			ft := keyType(t, []string{k})
			if ft == nil {
				continue // an unknown key: md.Undecoded reports it
			}
			key := append(prefix[:len(prefix):len(prefix)], k)
			if ft.Kind() == reflect.Map && ft.Key().Kind() == reflect.String {
				if sub, ok := m[k].(map[string]any); ok {
					for _, mk := range sortedKeys(sub) {
						check(append(key[:len(key):len(key)], mk), sub[mk], deref(ft.Elem()), line)
					}
				}
				continue
			}
			check(key, m[k], ft, line)
		}
	}
	walk(tree, reflect.TypeFor[Config](), nil, func(k toml.Key) int { return c.lines.key(k) })
	slices.SortStableFunc(errs, func(a, b ConfigError) int { return a.Line - b.Line })
	return errs, seen
}

// keyType returns the Go type key decodes into, starting from struct type
// t, or nil when no field takes it. Fields are matched as the decoder does:
// by toml tag or field name, exactly first, then ignoring case; untagged
// embedded structs are searched as if their fields were t's.
func keyType(t reflect.Type, key []string) reflect.Type {
	for _, k := range key {
		t = deref(t)
		switch {
		case t.Kind() == reflect.Struct:
			f, ok := tomlField(t, k)
			if !ok {
				return nil
			}
			t = f.Type
		case t.Kind() == reflect.Map:
			t = t.Elem()
		case t.Kind() == reflect.Slice:
			// An array of tables: the key names a field of its elements.
			et := deref(t.Elem())
			if et.Kind() != reflect.Struct {
				return nil
			}
			f, ok := tomlField(et, k)
			if !ok {
				return nil
			}
			t = f.Type
		default:
			return nil
		}
	}
	return deref(t)
}

// tomlField finds the field of struct t that TOML key k decodes into.
func tomlField(t reflect.Type, k string) (reflect.StructField, bool) {
	var fold reflect.StructField
	found := false
	for _, f := range reflect.VisibleFields(t) {
		if !f.IsExported() || len(f.Index) > 1 && !embeddedUntagged(t, f.Index) {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && deref(f.Type).Kind() == reflect.Struct {
			continue // its fields are visible on their own
		}
		if name == "" {
			name = f.Name
		}
		if name == k {
			return f, true
		}
		if !found && strings.EqualFold(name, k) {
			fold, found = f, true
		}
	}
	return fold, found
}

// embeddedUntagged reports whether every struct on the path to the field
// at index is embedded without a toml tag, so the decoder flattens it.
func embeddedUntagged(t reflect.Type, index []int) bool {
	for _, i := range index[:len(index)-1] {
		f := t.Field(i)
		if !f.Anonymous || f.Tag.Get("toml") != "" {
			return false
		}
		t = deref(f.Type)
	}
	return true
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// lookup returns the value at key in tree, or nil.
func lookup(tree map[string]any, key []string) any {
	var v any = tree
	for _, k := range key {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// splitKey splits a dotted key as the decoder prints it. Quoted parts
// (keys holding a dot) are kept whole.
func splitKey(s string) []string {
	var parts []string
	for s != "" {
		if s[0] == '"' {
			if q, err := strconv.QuotedPrefix(s); err == nil {
				p, _ := strconv.Unquote(q)
				parts = append(parts, p)
				s = strings.TrimPrefix(s[len(q):], ".")
				continue
			}
		}
		p, rest, _ := strings.Cut(s, ".")
		parts = append(parts, p)
		s = rest
	}
	return parts
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// fmtType names v's Go type the way the decoder's messages do.
func fmtType(v any) string {
	return strings.ReplaceAll(fmt.Sprintf("%T", v), "interface {}", "any")
}

// goTypeName turns the decoder's Go type of a TOML value into TOML words.
func goTypeName(t string) string {
	switch t {
	case "string":
		return "a string"
	case "int64":
		return "an integer"
	case "float64":
		return "a float"
	case "bool":
		return "a boolean"
	case "[]any":
		return "an array"
	case "map[string]any":
		return "a table"
	case "[]map[string]any":
		return "an array of tables"
	case "time.Time":
		return "a date or time"
	}
	return t
}

// wantName turns the decoder's destination kind into TOML words.
func wantName(t string) string {
	switch t {
	case "string", "primitive (string-like)":
		return "a string"
	case "integer":
		return "an integer"
	case "float":
		return "a number"
	case "boolean":
		return "true or false"
	case "slice":
		return "an array"
	case "map", "table":
		return "a table"
	}
	return t
}

// describeValue names a wrong duration value; scalars are shown, since a
// duration key holds no secret.
func describeValue(v any) string {
	switch v := v.(type) {
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return "the float " + strconv.FormatFloat(v, 'g', -1, 64)
	case bool:
		return fmt.Sprintf("the boolean %t", v)
	}
	return goTypeName(fmtType(v))
}

// elemIndex maps each [[table]] element, in file order, to the lines of
// its keys, so that an error about one element's key points at that key
// and not at the first element's (lineIndex keeps first lines only).
type elemIndex map[string][]map[string]int

func indexElems(text string) elemIndex {
	ix := elemIndex{}
	var cur map[string]int
	for i, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || line[0] == '#':
		case strings.HasPrefix(line, "[["):
			cur = nil
			if end := strings.Index(line, "]]"); end > 0 {
				name := strings.TrimSpace(line[2:end])
				cur = map[string]int{}
				ix[name] = append(ix[name], cur)
			}
		case line[0] == '[':
			cur = nil // a sub-table or another table: not this element's keys
		case cur != nil:
			if eq := strings.Index(line, "="); eq > 0 {
				k := strings.Trim(strings.TrimSpace(line[:eq]), `"'`)
				if _, ok := cur[k]; !ok {
					cur[k] = i + 1
				}
			}
		}
	}
	return ix
}

// elemKey returns the line of key in the i-th [[name]], else the line of
// that element's header, or 0.
func (c *Config) elemKey(name string, i int, key string) int {
	if l := c.elems[name]; i < len(l) && l[i][key] > 0 {
		return l[i][key]
	}
	return c.lines.arrayTable(name, i)
}
