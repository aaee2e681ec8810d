package gateway

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/upstream"
)

// Specs returns the upstreams of the config: [[upstream]] entries, then
// the lines of each [[upstream_file]]. A bad list-file line is logged with
// FILE:LINE and skipped, so one typo never drops the good lines; an
// unreadable list file is an error.
// It also returns how many upstreams each list file gave.
func (c *Config) Specs(log zerolog.Logger) ([]upstream.Spec, []ListCount, error) {
	specs, lists, problems, err := c.specs()
	for _, p := range problems {
		log.Warn().Str("err", p.Error()).Msg("upstream list line skipped")
	}
	return specs, lists, err
}

// ListCount is how many upstreams one [[upstream_file]] gave.
type ListCount struct {
	Path string // as opened (relative to the config file's directory)
	N    int
}

// specs is Specs without logging: it returns skipped lines as problems.
func (c *Config) specs() ([]upstream.Spec, []ListCount, []ConfigError, error) {
	var specs []upstream.Spec
	var problems []ConfigError
	var lists []ListCount
	for _, u := range c.Upstreams {
		s, err := u.spec()
		if err != nil {
			return nil, nil, nil, err
		}
		specs = append(specs, s)
	}
	seen := map[string]bool{}
	for _, s := range specs {
		seen[upstream.Identity(s.URL)] = true
	}
	for _, f := range c.UpstreamFiles {
		path := c.resolve(f.Path)
		fh, err := os.Open(path)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("upstream_file: %w", err)
		}
		scheme := f.Scheme
		if scheme == "" {
			scheme = "http"
		}
		entries, lineErrs := upstream.ParseList(fh, scheme)
		fh.Close()
		from := len(specs)
		for _, le := range lineErrs {
			problems = append(problems, ConfigError{File: path, Line: le.Line, Msg: le.Err.Error()})
		}
		for _, e := range entries {
			if err := upstream.ValidateURL(e.URL); err != nil {
				problems = append(problems, ConfigError{File: path, Line: e.Line, Msg: err.Error()})
				continue
			}
			k := upstream.Identity(e.URL)
			if seen[k] {
				problems = append(problems, ConfigError{File: path, Line: e.Line, Msg: "duplicate upstream " + upstream.Redact(e.URL)})
				continue
			}
			if f.Pipeline && e.URL.Scheme != "socks5" && e.URL.Scheme != "socks5h" {
				problems = append(problems, ConfigError{File: path, Line: e.Line, Msg: "pipeline = true applies to socks5 upstreams only: " + upstream.Redact(e.URL)})
				continue
			}
			seen[k] = true
			specs = append(specs, upstream.Spec{URL: e.URL, Tags: f.Tags, Pipeline: f.Pipeline})
		}
		lists = append(lists, ListCount{Path: path, N: len(specs) - from})
	}
	nameDefaults(specs)
	return specs, lists, problems, nil
}

// emptyListMsg describes a list file that gave no upstreams.
const emptyListMsg = "no upstreams in this list file (empty, only comments, or no usable line)"

// resolve makes a list-file path relative to the config file's directory.
func (c *Config) resolve(p string) string {
	if filepath.IsAbs(p) || c.path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.path), p)
}

// nameDefaults names unnamed upstreams host:port, or user@host:port when
// several share a host:port (session-in-username providers), and makes any
// remaining clash unique with a #N suffix.
func nameDefaults(specs []upstream.Spec) {
	hostCount := map[string]int{}
	for _, s := range specs {
		if s.Name == "" {
			hostCount[s.URL.Host]++
		}
	}
	used := map[string]bool{}
	for _, s := range specs {
		if s.Name != "" {
			used[s.Name] = true
		}
	}
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
		base := name
		for n := 2; used[name]; n++ {
			name = fmt.Sprintf("%s#%d", base, n)
		}
		used[name] = true
		s.Name = name
	}
}

// CheckLists returns the problems of the config's list files (for -check:
// at run time these lines are skipped with a warning, -check fails on
// them).
func (c *Config) CheckLists() error {
	_, lists, problems, err := c.specs()
	if err != nil {
		return ConfigErrors{{File: c.path, Line: 0, Msg: err.Error()}}
	}
	for _, l := range lists {
		if l.N == 0 {
			problems = append(problems, ConfigError{File: l.Path, Msg: emptyListMsg})
		}
	}
	if len(problems) > 0 {
		return ConfigErrors(problems)
	}
	return nil
}
