package gateway

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/BurntSushi/toml"
	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/upstream"
)

// Specs returns the upstreams of the config: [[upstream]] entries, then
// the lines of each [[upstream_file]]. A bad list-file line is logged with
// FILE:LINE and skipped, so one typo never drops the good lines; an
// unreadable list file is an error (ConfigErrors: every such file, at the
// line of its path).
// It also returns how many upstreams each list file gave.
func (c *Config) Specs(log zerolog.Logger) ([]upstream.Spec, []ListCount, error) {
	specs, lists, problems, err := c.specs()
	for _, p := range problems {
		log.Warn().Err(p).Msg("upstream list line skipped")
	}
	return specs, lists, err
}

// ListCount is how many upstreams one [[upstream_file]] gave.
type ListCount struct {
	Path string // as opened (relative to the config file's directory)
	N    int
	// Line is the line of its path in the config file, where an error
	// about the list as a whole (it gave no upstream) is reported.
	Line int
}

// emptyListError is the error of a list file l that gave no upstream, at
// the line of its path in the config file (the list has no line to
// name), then, in more, what that means for the running list.
func (c *Config) emptyListError(l ListCount, more string) ConfigError {
	return ConfigError{File: c.path, Line: l.Line, Msg: "upstream_file " + l.Path + ": " + emptyListMsg + more}
}

// specs is Specs without logging: it returns skipped lines as problems,
// in file order and, within a file, in line order. err holds every bad
// [[upstream]] and unreadable list file, not only the first, and every
// [[upstream]] name that is another one's default name (nameSpecs).
func (c *Config) specs() ([]upstream.Spec, []ListCount, []ConfigError, error) {
	var specs []upstream.Spec
	var from []origin
	var fatal ConfigErrors
	for i, u := range c.Upstreams {
		s, err := u.spec()
		if err != nil {
			fatal = append(fatal, ConfigError{File: c.path, Line: c.elemKey("upstream", i, "url"), Msg: err.Error()})
			continue
		}
		specs, from = append(specs, s), append(from, origin{elem: i})
	}
	lists, problems, ferrs := c.listSpecs(&specs, &from)
	if fatal = append(fatal, ferrs...); len(fatal) > 0 {
		return nil, nil, nil, fatal
	}
	specs, clashes, skipped := c.nameSpecs(specs, from, lists)
	if len(clashes) > 0 {
		return nil, nil, nil, clashes
	}
	return specs, lists, c.mergeProblems(problems, skipped, lists), nil
}

// origin is where a spec came from, for the errors about it: the elem-th
// [[upstream]] of the config (file ""), or line line of list file file.
type origin struct {
	elem int
	file string
	line int
}

// listSpecs appends the upstreams of every [[upstream_file]] to specs
// (whose [[upstream]] entries are there already, for duplicates), and
// where each came from to origins. It returns each readable file's count,
// the lines skipped, and one error per file that cannot be read, at the
// line of its path.
func (c *Config) listSpecs(specs *[]upstream.Spec, origins *[]origin) ([]ListCount, []ConfigError, ConfigErrors) {
	var problems []ConfigError
	var lists []ListCount
	var unreadable ConfigErrors
	seen := map[string]int{} // identity → index in specs, for the duplicates of it
	for i, s := range *specs {
		// The first of [[upstream]] duplicates is the one kept (validate
		// rejects the others): a list line's duplicate names it.
		k := upstream.Identity(s.URL)
		if _, dup := seen[k]; !dup {
			seen[k] = i
		}
	}
	for i, f := range c.UpstreamFiles {
		switch f.Scheme {
		case "", "http", "https", "socks5", "socks5h":
		default:
			continue // validate reports it at the scheme's line; the lines cannot be read without one
		}
		if f.Path == "" {
			// Unset, empty or of the wrong type (left at ""): reported
			// once at its line. Resolved, "" is the config file's own
			// directory, which gave a second, bogus error.
			continue
		}
		path := c.resolve(f.Path)
		fh, err := os.Open(path)
		if err != nil {
			unreadable = append(unreadable, ConfigError{File: c.path, Line: c.elemKey("upstream_file", i, "path"), Msg: "upstream_file: " + err.Error()})
			continue
		}
		// A directory opens, and its first read fails: that was reported
		// as a bad line 1 of it and then as a list with no upstreams.
		if info, err := fh.Stat(); err == nil && info.IsDir() {
			fh.Close()
			unreadable = append(unreadable, ConfigError{File: c.path, Line: c.elemKey("upstream_file", i, "path"), Msg: "upstream_file: " + path + " is a directory, not a list file"})
			continue
		}
		scheme := f.Scheme
		if scheme == "" {
			scheme = "http"
		}
		entries, lineErrs := upstream.ParseList(fh, scheme)
		fh.Close()
		from := len(*specs)
		var skipped []ConfigError
		for _, le := range lineErrs {
			skipped = append(skipped, ConfigError{File: path, Line: le.Line, Msg: le.Err.Error()})
		}
		for _, e := range entries {
			if err := upstream.ValidateURL(e.URL); err != nil {
				skipped = append(skipped, ConfigError{File: path, Line: e.Line, Msg: err.Error()})
				continue
			}
			k := upstream.Identity(e.URL)
			if prev, dup := seen[k]; dup {
				skipped = append(skipped, ConfigError{File: path, Line: e.Line,
					Msg: "upstream " + shown(upstream.Redact(e.URL)) + " duplicates the one at " + c.originAt((*origins)[prev], path) + " (that one is kept; this line is skipped)"})
				continue
			}
			if f.Pipeline && e.URL.Scheme != "socks5" && e.URL.Scheme != "socks5h" {
				skipped = append(skipped, ConfigError{File: path, Line: e.Line, Msg: "pipeline = true applies to socks5 upstreams only: " + upstream.Redact(e.URL)})
				continue
			}
			seen[k] = len(*specs)
			*specs = append(*specs, upstream.Spec{URL: e.URL, Tags: f.Tags, Pipeline: f.Pipeline})
			*origins = append(*origins, origin{elem: -1, file: path, line: e.Line})
		}
		// Lines that do not parse and lines that parse but are refused
		// were found in two passes: report them as they are in the file.
		problems = append(problems, ConfigErrors(skipped).sorted()...)
		lists = append(lists, ListCount{Path: path, N: len(*specs) - from, Line: c.elemKey("upstream_file", i, "path")})
	}
	return lists, problems, unreadable
}

// originAt names where o is for a message about a line of list file
// file: "line N" in that file, else FILE:LINE (the [[upstream]]'s url in
// the config file, or a line of another list).
func (c *Config) originAt(o origin, file string) string {
	switch {
	case o.file == "":
		return fmt.Sprintf("%s:%d", c.path, c.elemKey("upstream", o.elem, "url"))
	case o.file == file:
		return fmt.Sprintf("line %d", o.line)
	default:
		return fmt.Sprintf("%s:%d", o.file, o.line)
	}
}

// emptyListMsg describes a list file that gave no upstreams.
const emptyListMsg = "no upstreams in this list file (empty, only comments, or no usable line)"

// resolve makes a path of the config (state_file, upstream_ca_file, a
// list file) relative to the config file's directory.
func (c *Config) resolve(p string) string {
	if filepath.IsAbs(p) || c.path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.path), p)
}

// nameSpecs names the unnamed specs (nameDefaults; from says where each
// came from, lists are the list files read). An unnamed upstream whose
// default name is the name an [[upstream]] sets would make the admin API
// and the logs mean one while saying the other: for an unnamed [[upstream]]
// that is an error of the config, at the name (clashes); a list line is
// skipped (returned in skipped, left out of the specs returned and of
// its file's count in lists).
func (c *Config) nameSpecs(specs []upstream.Spec, from []origin, lists []ListCount) (named []upstream.Spec, clashes ConfigErrors, skipped []ConfigError) {
	explicit := map[string]int{} // name → index in specs
	for i, s := range specs {
		if s.Name != "" {
			explicit[s.Name] = i
		}
	}
	taken := nameDefaults(specs)
	if len(taken) == 0 {
		return specs, nil, nil
	}
	drop := make(map[int]bool, len(taken))
	for _, i := range taken {
		owner := from[explicit[specs[i].Name]]
		nameLine := c.elemKey("upstream", owner.elem, "name")
		if o := from[i]; o.file == "" {
			clashes = append(clashes, ConfigError{File: c.path, Line: nameLine,
				Msg: fmt.Sprintf("upstream name %q duplicates the one at line %d (the default name of that unnamed upstream): name one of them otherwise", shown(specs[i].Name), c.elemKey("upstream", o.elem, "url"))})
		} else {
			skipped = append(skipped, ConfigError{File: o.file, Line: o.line,
				Msg: fmt.Sprintf("upstream %s would be named %q, which is the name of the [[upstream]] at %s:%d (rename that one)", shown(upstream.Redact(specs[i].URL)), shown(specs[i].Name), c.path, nameLine)})
			drop[i] = true
			if l := slices.IndexFunc(lists, func(l ListCount) bool { return l.Path == o.file }); l >= 0 {
				lists[l].N--
			}
		}
	}
	if len(clashes) > 0 {
		return nil, clashes.sorted(), nil
	}
	named = specs[:0:0]
	for i, s := range specs {
		if !drop[i] {
			named = append(named, s)
		}
	}
	return named, nil, skipped
}

// mergeProblems puts the lines nameSpecs skipped among the problems
// listSpecs found, keeping the order of files and, in each, of lines.
func (c *Config) mergeProblems(problems, more []ConfigError, lists []ListCount) []ConfigError {
	if len(more) == 0 {
		return problems
	}
	order := make(map[string]int, len(lists))
	for i := len(lists) - 1; i >= 0; i-- {
		order[lists[i].Path] = i
	}
	all := append(append([]ConfigError(nil), problems...), more...)
	slices.SortStableFunc(all, func(a, b ConfigError) int {
		if d := order[a.File] - order[b.File]; d != 0 {
			return d
		}
		return a.Line - b.Line
	})
	return all
}

// nameDefaults names the unnamed specs host:port ("direct" for direct),
// or user@host:port when several share a host:port (session-in-username
// providers: identity includes the username). A default name that
// another unnamed spec has already is made unique with a ~N suffix ('~'
// needs no escaping in a URL, so the admin API's path takes it as it is;
// a '#' would be cut off as a fragment). It returns, in order, the
// unnamed specs whose default name is a name a spec sets: those are given
// that name, for the caller to refuse.
func nameDefaults(specs []upstream.Spec) (taken []int) {
	hostCount := map[string]int{}
	for _, s := range specs {
		if s.Name == "" {
			hostCount[s.URL.Host]++
		}
	}
	explicit := map[string]bool{}
	for _, s := range specs {
		if s.Name != "" {
			explicit[s.Name] = true
		}
	}
	used := maps.Clone(explicit)
	// next[base] is the first suffix not yet tried for base: every
	// base~N below it is taken, so the search resumes there. Starting
	// again at ~2 for each of n specs sharing a default name (n copies of
	// direct://, which -check reports as duplicates) made -check
	// quadratic: 20,000 copies took 32 s.
	next := map[string]int{}
	for i := range specs {
		s := &specs[i]
		if s.Name != "" {
			continue
		}
		name := s.URL.Host
		if s.URL.Scheme == "direct" {
			name = "direct"
		} else if hostCount[s.URL.Host] > 1 && s.URL.User != nil {
			name = s.URL.User.Username() + "@" + s.URL.Host
		}
		if explicit[name] {
			taken = append(taken, i)
			s.Name = name
			continue
		}
		if used[name] {
			base, n := name, max(next[name], 2)
			for ; used[name]; n++ {
				name = base + "~" + strconv.Itoa(n)
			}
			next[base] = n
		}
		used[name] = true
		s.Name = name
	}
	return taken
}

// CheckConfig is -check: it reads the config file at path and its list
// files and returns every problem found (ConfigErrors), or nil. Unlike a
// start or a reload, which skip a bad list line with a warning, it fails
// on them; and it checks the list files of a config with errors too, so
// that one run reports everything it can.
func CheckConfig(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return ConfigErrors{{File: path, Msg: err.Error()}}
	}
	c, errs := parseConfig(path, data)
	if c != nil {
		// An unreadable list file and a state_file that cannot be
		// written are errors of this file, in line order with the
		// others; then the list files' own problems.
		unreadable, lists := c.listErrors()
		errs = append(append(append(errs, unreadable...), c.stateFileErrors()...).sorted(), lists...)
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// stateFileErrors is -check's error for a state_file rotor could never
// write (stateFileError), at its line, or nil. A start only warns (rotor
// runs without persistence) and a reload cannot change state_file, so
// only -check fails on it.
func (c *Config) stateFileErrors() ConfigErrors {
	path := c.statePath()
	if path == "" {
		return nil
	}
	if err := stateFileError(path); err != nil {
		return ConfigErrors{{File: c.path, Line: c.lines.key(toml.Key{"state_file"}), Msg: "state_file " + path + " cannot be written: " + err.Error()}}
	}
	return nil
}

// CheckLists returns the problems of the config's list files (for -check:
// at run time these lines are skipped with a warning, -check fails on
// them), or nil.
func (c *Config) CheckLists() error {
	own, lists := c.listErrors()
	if errs := append(own.sorted(), lists...); len(errs) > 0 {
		return errs
	}
	return nil
}

// listErrors is every problem of the list files, and of the names they
// give: own holds the errors of the config file itself (each unreadable
// file and each that gave no upstream, at the line of its path; each
// [[upstream]] name that is another [[upstream]]'s default name),
// problems each readable file's skipped lines in line order.
func (c *Config) listErrors() (own, problems ConfigErrors) {
	var specs []upstream.Spec
	var from []origin
	for i, u := range c.Upstreams {
		if s, err := u.spec(); err == nil { // a bad one is a config error
			specs, from = append(specs, s), append(from, origin{elem: i})
		}
	}
	lists, skipped, own := c.listSpecs(&specs, &from)
	_, clashes, more := c.nameSpecs(specs, from, lists)
	own = append(own, clashes...)
	skipped = c.mergeProblems(skipped, more, lists)
	for _, l := range lists {
		for len(skipped) > 0 && skipped[0].File == l.Path {
			problems, skipped = append(problems, skipped[0]), skipped[1:]
		}
		if l.N == 0 {
			own = append(own, c.emptyListError(l, ""))
		}
	}
	return own, append(problems, skipped...)
}
