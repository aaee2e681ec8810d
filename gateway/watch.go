package gateway

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
)

// reloadDebounce lets an editor finish a multi-step save before reloading.
const reloadDebounce = 300 * time.Millisecond

// Watch reloads on every signal from hup (SIGHUP) and on every change of the
// config file or its list files, until ctx ends. One watcher lives for the
// whole run, so a change made while a reload is in progress is queued, not
// lost; after each reload the set of files is re-read, so an
// [[upstream_file]] added by a reload is watched too. Directories are
// watched rather than files, so editors that replace a file (write +
// rename) and Kubernetes ConfigMap symlink swaps are seen. Failures are
// logged with FILE:LINE and change nothing.
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
	refresh := func() {
		files = s.watchedFiles()
		for f := range files {
			d := filepath.Dir(f)
			if w == nil || dirs[d] {
				continue
			}
			if err := w.Add(d); err != nil {
				s.log.Warn().Err(err).Str("dir", d).Msg("cannot watch directory")
				continue
			}
			dirs[d] = true
		}
	}
	reload := func(why string) {
		s.log.Info().Str("reason", why).Msg("reloading")
		if err := s.ReloadFile(); err != nil {
			logReloadError(s.log, err)
		}
		refresh()
	}
	refresh()
	var debounce <-chan time.Time
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
			if files[filepath.Clean(ev.Name)] && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 {
				debounce = time.After(reloadDebounce)
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			s.log.Warn().Err(err).Msg("file watch error")
		case <-debounce:
			debounce = nil
			reload("config file changed")
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

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// logReloadError logs a rejected reload. Several problems (a config with
// several errors, or a joined error) are logged one per line, err being
// FILE:LINE: message, then the rejection with their count: no log line
// holds a multi-line string.
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
	if len(msgs) == 1 {
		log.Error().Str("err", msgs[0]).Msg("reload rejected: keeping the running config")
		return
	}
	for _, m := range msgs {
		log.Error().Str("err", m).Msg("config error")
	}
	log.Error().Int("errors", len(msgs)).Msg("reload rejected: keeping the running config")
}
