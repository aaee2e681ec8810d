package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
)

// reloadDebounce lets an editor finish a multi-step save before reloading.
// It also spaces the re-checks that unrelated changes in a watched
// directory cause, at most one per reloadDebounce.
const reloadDebounce = 300 * time.Millisecond

// Watch reloads on every signal from hup (SIGHUP) and on every change of the
// config file or its list files, until ctx ends. One watcher lives for the
// whole run, so a change made while a reload is in progress is queued, not
// lost; after each reload the set of files is re-read, so an
// [[upstream_file]] added by a reload is watched too. Failures are logged
// with FILE:LINE and change nothing.
//
// Directories are watched rather than files: the directory of each file,
// and the directory its symlinks lead to. An event naming a watched file
// (an in-place write, an editor's write + rename, delete + recreate)
// reloads after reloadDebounce. Any other event in those directories makes
// Watch look at every watched file again (watchSet) and reload when one
// now resolves to another file or its stat identity changed: a Kubernetes
// ConfigMap update swaps the ..data symlink the files lead through
// (ln -s v2 ..data_tmp && mv -T ..data_tmp ..data) and names none of them.
// Other churn in the directories reloads nothing.
func (s *Server) Watch(ctx context.Context, hup <-chan os.Signal) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn().Err(err).Msg("file watching unavailable: reload with SIGHUP")
	} else {
		defer w.Close()
	}
	var events chan fsnotify.Event
	var errs chan error
	if w != nil {
		events, errs = w.Events, w.Errors
	}
	dirs := map[string]bool{}
	files := map[string]bool{}
	var ws watchSet
	refresh := func() {
		files = s.watchedFiles()
		want := ws.set(files)
		if w == nil {
			return
		}
		for d := range dirs {
			if !want[d] {
				_ = w.Remove(d) // fails when the directory went away: nothing left to remove
				delete(dirs, d)
			}
		}
		for d := range want {
			if dirs[d] {
				continue
			}
			if err := w.Add(d); err != nil {
				s.log.Warn().Err(err).Str("dir", d).Msg("cannot watch directory")
				continue
			}
			dirs[d] = true
		}
	}
	// pending is the watched files seen changed since the last reload:
	// what a change-driven reload's line names.
	pending := map[string]bool{}
	reload := func(why string) {
		if s.cfg.Load().Path() == "" {
			// Built-in defaults: without this line a SIGHUP logged
			// "reloading" and then nothing.
			s.log.Info().Str("reason", why).Msg("nothing to reload: running on built-in defaults (no config file)")
			return
		}
		ev := s.log.Info()
		if why == "" {
			ev = s.changedFiles(ev, pending)
			clear(pending)
		} else {
			// A SIGHUP leaves pending to the change's own reload, due
			// after reloadDebounce.
			ev = ev.Str("reason", why)
		}
		ev.Msg("reloading")
		// What the reload reads is at least as new as what is seen now,
		// so a change made during the reload still differs afterwards.
		ws.changed()
		if err := s.ReloadFile(); err != nil {
			logReloadError(s.log, err)
		}
		refresh()
	}
	refresh()
	var debounce, recheck <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			reload("SIGHUP")
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			switch {
			case files[filepath.Clean(ev.Name)] && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0:
				pending[filepath.Clean(ev.Name)] = true
				debounce = time.After(reloadDebounce)
			case recheck == nil:
				// Not reset by later events, so steady churn (a log
				// file next to the config) cannot postpone it for ever.
				recheck = time.After(reloadDebounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn().Err(err).Msg("file watch error")
		case <-recheck:
			recheck = nil
			if diff := ws.changed(); len(diff) > 0 {
				for _, f := range diff {
					pending[f] = true
				}
				debounce = time.After(reloadDebounce)
			}
		case <-debounce:
			debounce = nil
			reload("") // the reason is which files changed
		}
	}
}

// watchedFiles is the config file and its list files (none with built-in
// defaults).
func (s *Server) watchedFiles() map[string]bool {
	cfg := s.cfg.Load()
	files := map[string]bool{}
	if cfg.Path() == "" {
		return files
	}
	files[filepath.Clean(absPath(cfg.Path()))] = true
	for _, f := range cfg.UpstreamFiles {
		files[filepath.Clean(absPath(cfg.resolve(f.Path)))] = true
	}
	return files
}

// fileID is what Watch compares to tell whether a watched file changed:
// the file its path resolves to through every symlink, and that file's
// stat identity (device and inode, size, modification time, mode).
type fileID struct {
	target string      // "" when the path does not resolve
	info   os.FileInfo // nil when target cannot be stat'ed
}

func statFile(path string) fileID {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fileID{}
	}
	info, err := os.Stat(target)
	if err != nil {
		return fileID{target: target}
	}
	return fileID{target: target, info: info}
}

func (a fileID) same(b fileID) bool {
	if a.target != b.target || (a.info == nil) != (b.info == nil) {
		return false
	}
	return a.info == nil || os.SameFile(a.info, b.info) && a.info.Size() == b.info.Size() &&
		a.info.ModTime().Equal(b.info.ModTime()) && a.info.Mode() == b.info.Mode()
}

// watchSet is what Watch last saw of each watched file. Only Watch's
// goroutine uses it.
type watchSet struct {
	seen map[string]fileID // by clean absolute path
}

// set makes files the watched set, keeping what was seen of the files
// still in it and looking at the new ones, and returns the directories to
// watch: each file's own, and the one its resolved target is in.
func (ws *watchSet) set(files map[string]bool) map[string]bool {
	seen := make(map[string]fileID, len(files))
	dirs := make(map[string]bool, 2*len(files))
	for f := range files {
		id, ok := ws.seen[f]
		if !ok {
			id = statFile(f)
		}
		seen[f] = id
		dirs[filepath.Dir(f)] = true
		if id.target != "" {
			dirs[filepath.Dir(id.target)] = true
		}
	}
	ws.seen = seen
	return dirs
}

// changed looks at every watched file again and returns those that
// differ from when they were last seen (none: nil); what it sees now
// becomes the reference.
func (ws *watchSet) changed() []string {
	var diff []string
	for f, old := range ws.seen {
		if id := statFile(f); !id.same(old) {
			ws.seen[f] = id
			diff = append(diff, f)
		}
	}
	return diff
}

// changedFiles adds to a reload's line what made it: the reason ("config
// file changed", "upstream list file changed", or both) and the path of
// each file in changed (file, or files for more than one). A change of an
// [[upstream_file]] list was logged as "config file changed", so an
// operator looked for an edit of the config that nobody made.
func (s *Server) changedFiles(ev *zerolog.Event, changed map[string]bool) *zerolog.Event {
	conf := ""
	if p := s.cfg.Load().Path(); p != "" {
		conf = filepath.Clean(absPath(p))
	}
	paths := make([]string, 0, len(changed))
	var config, lists bool
	for f := range changed {
		paths = append(paths, f)
		if f == conf {
			config = true
		} else {
			lists = true
		}
	}
	slices.Sort(paths)
	switch {
	case config && lists:
		ev = ev.Str("reason", "config file and upstream list file changed")
	case lists:
		ev = ev.Str("reason", "upstream list file changed")
	default:
		ev = ev.Str("reason", "config file changed")
	}
	if len(paths) == 1 {
		return ev.Str("file", paths[0])
	}
	return ev.Strs("files", paths)
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// logReloadError logs a rejected reload: each problem (of a config with
// errors, or of a joined error) on its own "config error" line, error
// being FILE:LINE: message, then the rejection with their count, so no
// log line holds a multi-line string. One problem is logged the same way
// (it was the rejection line's error, with no count, and a search for
// "config error" missed it).
func logReloadError(log zerolog.Logger, err error) {
	var msgs []string
	var ces ConfigErrors
	if errors.As(err, &ces) {
		for _, ce := range ces {
			msgs = append(msgs, ce.Error())
		}
	} else {
		for _, e := range leafErrors(err) {
			msgs = append(msgs, e.Error())
		}
	}
	for _, m := range msgs {
		log.Error().Str(errField, m).Msg("config error")
	}
	log.Error().Int("errors", len(msgs)).Msg("reload rejected: keeping the running config")
}
