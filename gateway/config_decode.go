package gateway

// Decoding errors, reported FILE:LINE: key: message like every other
// config problem (-check, reload). BurntSushi/toml gives a line for syntax
// errors only (toml.ParseError); it stops at the first value it cannot
// convert, with a plain text ("toml: line 5 (last key ...): incompatible
// types: ...") carrying the line of the LAST [[table]] element that holds
// the key; and it decodes an integer into a time.Duration as nanoseconds
// ("timeout = 5" is 5ns, and every probe fails). So a config is decoded
// in two steps: the plain tree (only a syntax error stops there), then the
// typed config. When the typed decode fails, each value of the tree is
// decoded on its own, and every one that fails is reported at its own
// line and left out before the config is decoded again: one run reports
// every such error, and validation still runs on the rest.

import (
	"bytes"
	"encoding"
	"errors"
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

// decodeTree decodes text into plain maps: what each key holds as
// written. It fails only on syntax.
func decodeTree(text string) (map[string]any, error) {
	var tree map[string]any
	_, err := toml.Decode(text, &tree)
	return tree, err
}

// parseError formats a syntax error, at the line of the byte it is
// about. The decoder's own line is one too far when that byte is a
// newline ("[listen" then a line break is reported at the next line), so
// the line is counted from the byte offset it gives, when it gives one.
//
// The decoder's message quotes the text it stopped at ("expected value
// but found \"SeCrEt\" instead" for password = SeCrEt, its quotes
// forgotten), and when parsing failed no secret of the file is known to
// redactText. So a syntax error in the value of a key that may hold a
// secret (secretKey) is told in rotor's words, which quote nothing of it.
func (c *Config) parseError(pe toml.ParseError, text string) ConfigError {
	line := pe.Position.Line
	start := pe.Position.Start
	if start > 0 && start <= len(text) {
		line = 1 + strings.Count(text[:start], "\n")
	} else {
		start = lineEnd(text, line) // no offset: as far as the line goes
	}
	msg := shownWords(redactText(pe.Message))
	st := statementAt(text, start)
	// The decoder's last key may be the statement's before, and it knows
	// the parent of a key in an inline table. Its table's name is not
	// matched: [cooldown.auth_rejected] holds no secret.
	last := pe.LastKey
	if st.table != "" && (last == st.table || strings.HasPrefix(last, st.table+".")) {
		last = last[len(st.table):]
	}
	if secretKey(st.key) || secretKey(last) {
		key := st.name() // the key the text shows at the error
		if !secretKey(st.key) || st.inline && strings.HasSuffix(pe.LastKey, "."+st.key) {
			key = pe.LastKey
		}
		msg = secretSyntaxMsg(shown(key), pe.Message, st.bare)
	}
	return ConfigError{File: c.path, Line: line, Msg: msg}
}

// secretWords mark the keys whose value may be a secret: password (of a
// [[client]]; redis_password_env names a variable, but is hidden too),
// admin_token, url ([[upstream]], and probe.url, which may carry a
// userinfo), redis ([cluster], redis://:pw@host). They are matched as
// parts of key names, case ignored, so a misspelt or unknown key that
// looks like one (passwd, api_key, auth) is hidden as well: hiding costs
// a syntax error no more than the value's text.
var secretWords = []string{"pass", "pw", "token", "secret", "auth", "cred", "key", "url", "redis"}

// secretKey reports whether any part of the dotted key k may name a
// secret (secretWords).
func secretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// secretSyntaxMsg says what is wrong with the value of key, a key that
// may hold a secret, without a byte of the value: msg is the decoder's
// message, which is only matched, never shown unless it quotes nothing.
// bare tells that the value starts as no string, array or table does.
func secretSyntaxMsg(key, msg string, bare bool) string {
	const notShown = " (the value is not shown: it may be a secret)"
	switch {
	case strings.HasPrefix(msg, "expected '.' or '='"):
		return key + ": expected '=' after the key" + notShown
	case bare || strings.HasPrefix(msg, "expected value but found"):
		return key + ": the value must be quoted: " + lastPart(key) + ` = "…"` + notShown
	case strings.Contains(msg, "escape") || strings.Contains(msg, "hexadecimal digits after"):
		return key + `: invalid escape in the string (write \\ for a backslash, or quote the value with ' instead of ")` + notShown
	case strings.Contains(msg, "control characters"):
		return key + `: the string holds a control character (write it as \uXXXX)` + notShown
	case msg == "strings cannot contain newlines" || strings.HasPrefix(msg, "unexpected EOF"):
		return key + ": " + msg + notShown // these quote nothing of the value
	case strings.HasPrefix(msg, "expected a top-level item to end with"):
		return key + ": unexpected text after the value on its line" + notShown
	}
	return key + ": invalid value" + notShown
}

// lastPart is the last part of the dotted key k.
func lastPart(k string) string {
	if i := strings.LastIndexByte(k, '.'); i >= 0 {
		return k[i+1:]
	}
	return k
}

// lineEnd returns the offset of the end of line n (1-based) of text.
func lineEnd(text string, n int) int {
	off := 0
	for ; n > 1; n-- {
		i := strings.IndexByte(text[off:], '\n')
		if i < 0 {
			return len(text)
		}
		off += i + 1
	}
	if i := strings.IndexByte(text[off:], '\n'); i >= 0 {
		return off + i
	}
	return len(text)
}

// statement is the key a byte of a TOML text belongs to the value of.
type statement struct {
	table  string // name of the [table] or [[table]] the key is in
	key    string // the key as written ("password", `"a b".c`); "" for none
	inline bool   // key is inside an inline table (its parent is not known)
	bare   bool   // the value starts as no string, array or table does
}

// name is the dotted name of the key, with its table when known.
func (st statement) name() string {
	if st.table == "" || st.inline || st.key == "" {
		return st.key
	}
	return st.table + "." + st.key
}

// statementAt returns the key whose value the byte at off of text belongs
// to: the last key before off whose '=' starts a value that off may be
// in. It reads text as TOML does only as far as that needs (strings,
// comments, brackets and the separators of keys), so that a syntax error
// is matched to its key even when it is lines after it, in a multi-line
// string or array, or comes after a value the decoder took whole
// (password = 12.3abc). A statement with no '=' yet gets its first word
// as its key (password SeCrEt). Text the decoder refused is read on as
// far as off: where it cannot be TOML, the key found last is kept, which
// hides more rather than less.
func statementAt(text string, off int) statement {
	var st statement
	if off > len(text) {
		off = len(text)
	}
	depth := 0 // open [ and { inside a value
	lineStart := true
	delim := -1 // the byte before the current key: '\n', '{' or ','
	for i := 0; i < off; i++ {
		ch := text[i]
		switch {
		case ch == '\n':
			lineStart = true
			if depth == 0 {
				st.key, st.inline, delim = "", false, i
			}
			continue
		case ch == ' ' || ch == '\t' || ch == '\r':
			continue
		case ch == '#':
			i = skipTo(text, i, off, "\n") - 1
		case ch == '"' || ch == '\'':
			i = skipString(text, i, off) - 1
		case ch == '[' && lineStart && depth == 0:
			end := skipTo(text, i, off, "\n")
			name, _, _ := strings.Cut(strings.TrimLeft(text[i:end], "[ \t"), "]")
			st.table, st.key, delim = strings.TrimSpace(name), "", end
			i = end - 1
		case ch == '[' || ch == '{':
			depth++
			if ch == '{' {
				delim = i
			}
		case ch == ']' || ch == '}':
			if depth > 0 {
				depth--
			}
		case ch == ',':
			delim = i
		case ch == '=':
			st.key = strings.TrimSpace(text[delim+1 : i])
			st.inline = depth > 0
			v := strings.TrimLeft(text[i+1:], " \t")
			st.bare = v == "" || !strings.ContainsRune(`"'[{`, rune(v[0]))
		}
		if st.key == "" && lineStart && depth == 0 && ch != '=' && ch != '[' && ch != '#' {
			st.key = firstWord(text[i:])
		}
		lineStart = false
	}
	return st
}

// firstWord is the dotted bare key s starts with (letters, digits, '_',
// '-', '.').
func firstWord(s string) string {
	n := 0
	for n < len(s) && (isAlnum(s[n]) || s[n] == '_' || s[n] == '-' || s[n] == '.') {
		n++
	}
	return s[:n]
}

// skipTo returns the offset of the first byte of end at or after i in
// text[:off], or off.
func skipTo(text string, i, off int, end string) int {
	if j := strings.Index(text[i:off], end); j >= 0 {
		return i + j
	}
	return off
}

// skipString returns the offset just past the TOML string that starts at
// text[i] (basic or literal, single or multi-line), or off when it does
// not end before off. A single-line string also ends at a newline (the
// decoder's error then).
func skipString(text string, i, off int) int {
	q := text[i]
	if strings.HasPrefix(text[i:], strings.Repeat(string(q), 3)) {
		end := strings.Repeat(string(q), 3)
		for j := i + 3; j < off; j++ {
			switch {
			case q == '"' && text[j] == '\\':
				j++
			case strings.HasPrefix(text[j:], end):
				return min(j+3, off)
			}
		}
		return off
	}
	for j := i + 1; j < off; j++ {
		switch {
		case q == '"' && text[j] == '\\':
			j++
		case text[j] == q:
			return j + 1
		case text[j] == '\n':
			return j
		}
	}
	return off
}

// decode fills c from text, whose plain tree is tree. It returns the
// errors of values that could not be decoded, each at its line; those
// values are removed from tree and left at their zero value in c. ok is
// false when the config could not be decoded even so (errs then says why).
func (c *Config) decode(text string, tree map[string]any) (md toml.MetaData, errs ConfigErrors, ok bool) {
	errs = c.checkTree(tree, false)
	if len(errs) == 0 {
		var dst Config
		if md, err := toml.Decode(text, &dst); err == nil {
			c.set(dst)
			return md, nil, true
		}
	}
	// Some value is wrong: decode each on its own, leave out those that
	// fail, and decode what is left.
	errs = append(errs, c.checkTree(tree, true)...)
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(tree); err != nil {
		return md, append(errs, ConfigError{File: c.path, Msg: redactText(strings.TrimPrefix(err.Error(), "toml: "))}), false
	}
	var dst Config
	md, err := toml.Decode(buf.String(), &dst)
	if err != nil {
		// Something checkTree cannot see: reported as the decoder says,
		// at the key's line (the decoder's is that of buf, not of text).
		key, msg := decodeMsg(err)
		line := 0
		if key != nil {
			line = c.lines.key(toml.Key(key))
		}
		return md, append(errs, ConfigError{File: c.path, Line: line, Msg: redactText(msg)}), false
	}
	c.set(dst)
	return md, errs, true
}

// set copies the decoded fields of d into c, keeping c's file and index.
func (c *Config) set(d Config) {
	d.path, d.lines, d.elems = c.path, c.lines, c.elems
	*c = d
}

// checkTree reports the values of tree that the typed decode would refuse
// or misread, and deletes them from tree: with leaves false only integer
// (and other non-string) durations, which the decoder takes as
// nanoseconds; with leaves true also every value that fails to decode
// into its field on its own (a wrong type, a bad duration string, a value
// out of range). Unknown keys are left for md.Undecoded.
func (c *Config) checkTree(tree map[string]any, leaves bool) ConfigErrors {
	var errs ConfigErrors
	var walk func(m map[string]any, t reflect.Type, prefix toml.Key, line func(toml.Key) int)
	// check reports whether v, at key, may stay.
	var check func(key toml.Key, v any, t reflect.Type, line func(toml.Key) int) bool
	check = func(key toml.Key, v any, t reflect.Type, line func(toml.Key) int) bool {
		switch {
		case t == durationType:
			if _, ok := v.(string); !ok {
				errs = append(errs, ConfigError{File: c.path, Line: line(key),
					Msg: fmt.Sprintf("%s: want a duration string like \"5s\", got %s", shown(key.String()), describeValue(v))})
				return false
			}
		case t.Kind() == reflect.Struct:
			if sub, ok := v.(map[string]any); ok {
				walk(sub, t, key, line)
				return true
			}
		case t.Kind() == reflect.Slice && deref(t.Elem()).Kind() == reflect.Struct:
			if elems, ok := tables(v); ok {
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
				return true
			}
		case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String:
			if sub, ok := v.(map[string]any); ok {
				for _, mk := range sortedKeys(sub) {
					if !check(append(key[:len(key):len(key)], mk), sub[mk], deref(t.Elem()), line) {
						delete(sub, mk)
					}
				}
				return true
			}
		}
		if !leaves {
			return true
		}
		if err := decodeLeaf(v, t); err != nil {
			errs = append(errs, c.leafError(key, v, t, err, line(key)))
			return false
		}
		return true
	}
	walk = func(m map[string]any, t reflect.Type, prefix toml.Key, line func(toml.Key) int) {
		for _, k := range sortedKeys(m) {
			ft := keyType(t, []string{k})
			if ft == nil {
				continue // an unknown key: md.Undecoded reports it
			}
			if !check(append(prefix[:len(prefix):len(prefix)], k), m[k], ft, line) {
				delete(m, k)
			}
		}
	}
	walk(tree, reflect.TypeFor[Config](), nil, func(k toml.Key) int { return c.lines.key(k) })
	return errs
}

// tables returns v as the tables of an array of tables: [[name]]
// sections, or an inline array whose elements are all tables.
func tables(v any) ([]map[string]any, bool) {
	switch v := v.(type) {
	case []map[string]any:
		return v, true
	case []any:
		out := make([]map[string]any, len(v))
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			out[i] = m
		}
		return out, true
	}
	return nil, false
}

// decodeLeaf decodes v alone into a value of type t, as the typed decode
// would in its field, and returns the decoder's error.
func decodeLeaf(v any, t reflect.Type) error {
	if plainMatch(v, t) {
		return nil
	}
	var buf bytes.Buffer
	if err := toml.NewEncoder(&buf).Encode(map[string]any{"v": v}); err != nil {
		return nil // not re-encodable: the decode of the whole says
	}
	holder := reflect.StructOf([]reflect.StructField{{Name: "V", Type: t, Tag: `toml:"v"`}})
	_, err := toml.Decode(buf.String(), reflect.New(holder).Interface())
	return err
}

var (
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
	tomlUnmarshalerType = reflect.TypeFor[toml.Unmarshaler]()
)

// plainMatch reports whether v certainly decodes into t: the plain cases
// (a string into a string, an integer into an int or int64, a number into
// a float64, a boolean, arrays of those), which make up most of a config
// and need no trial decode. Anything else is left to the decoder.
func plainMatch(v any, t reflect.Type) bool {
	if t.Implements(textUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType) ||
		t.Implements(tomlUnmarshalerType) || reflect.PointerTo(t).Implements(tomlUnmarshalerType) || t == durationType {
		return false
	}
	switch v := v.(type) {
	case string:
		return t.Kind() == reflect.String
	case bool:
		return t.Kind() == reflect.Bool
	case int64:
		return t.Kind() == reflect.Int || t.Kind() == reflect.Int64 || t.Kind() == reflect.Float64 && v > -(1<<53) && v < 1<<53
	case float64:
		return t.Kind() == reflect.Float64
	case []any:
		if t.Kind() != reflect.Slice {
			return false
		}
		for _, e := range v {
			if !plainMatch(e, t.Elem()) {
				return false
			}
		}
		return true
	}
	return false
}

// leafError formats the error of decodeLeaf for v at key. A value is not
// shown (it may be a password), except a bad duration string.
func (c *Config) leafError(key toml.Key, v any, t reflect.Type, err error, line int) ConfigError {
	var msg string
	var pe toml.ParseError
	if errors.As(err, &pe) {
		msg = pe.Message
		if s, ok := v.(string); ok && t == durationType {
			msg = fmt.Sprintf("invalid duration %q (want a duration string like \"5s\", \"500ms\" or \"1m30s\")", shown(s))
		}
	} else {
		var k []string
		k, msg = decodeMsg(err)
		if k != nil {
			msg = strings.TrimPrefix(msg, strings.Join(k, ".")+": ") // the holder's key, "v"
		}
	}
	return ConfigError{File: c.path, Line: line, Msg: redactText(shown(key.String()) + ": " + msg)}
}

// decodeErrRE matches the decoder's errors without a position field:
// `toml: line 5 (last key "upstream.tags"): incompatible types: ...`.
var decodeErrRE = regexp.MustCompile(`^toml: (?:line (\d+) )?\(last key ("(?:[^"\\]|\\.)*")\): (.*)$`)

// typeErrRE matches the two type mismatch texts of the decoder: groups 1
// and 4 are the Go type of the TOML value, 2 and 3 the destination. Their
// wording is pinned by TestConfigDecodeErrorsFileLine; text that no longer
// matches is still reported, only less clearly.
var typeErrRE = regexp.MustCompile(`^(?:incompatible types: TOML value has type (.+); destination has type (.+)|type mismatch for .+: expected (table) but found (.+))$`)

// decodeMsg turns an error of the typed decode that has no position
// field into "key: message" in TOML words, and returns the key (nil when
// the decoder named none).
func decodeMsg(err error) ([]string, string) {
	m := decodeErrRE.FindStringSubmatch(err.Error())
	if m == nil {
		return nil, strings.TrimPrefix(err.Error(), "toml: ")
	}
	keyStr, uerr := strconv.Unquote(m[2])
	if uerr != nil {
		keyStr = strings.Trim(m[2], `"`)
	}
	msg := m[3]
	if t := typeErrRE.FindStringSubmatch(msg); t != nil {
		want, got := t[2], t[1]
		if t[3] != "" {
			want, got = t[3], t[4]
		}
		msg = "want " + wantName(want) + ", got " + goTypeName(got)
	}
	return splitKey(keyStr), shown(keyStr) + ": " + msg
}

// elemsSetting reports, for each element of the array of tables name in
// tree, whether it sets the key that decodes into field of elem (matched
// as the decoder matches keys, so "Name" sets Name too).
func elemsSetting(tree map[string]any, name string, elem reflect.Type, field string) []bool {
	elems, _ := tree[name].([]map[string]any)
	set := make([]bool, len(elems))
	for i, e := range elems {
		for k := range e {
			if f, ok := tomlField(elem, k); ok && f.Name == field {
				set[i] = true
			}
		}
	}
	return set
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
// that element's header, else (an inline array, name = [{...}]) the line
// of name, or 0.
func (c *Config) elemKey(name string, i int, key string) int {
	if l := c.elems[name]; i < len(l) && l[i][key] > 0 {
		return l[i][key]
	}
	if l := c.lines.arrayTable(name, i); l > 0 {
		return l
	}
	return c.lines.keys[name]
}
