package gateway

import (
	"context"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/rs/zerolog"
)

// WatchFiles reports changes of the config file and its list files on the
// returned channel, debounced, until ctx ends. Directories are watched
// rather than files, so editors that replace a file (write + rename) and
// Kubernetes ConfigMap symlink swaps are seen too. With no file (built-in
// defaults) the channel never fires.
func WatchFiles(ctx context.Context, cfg *Config, log zerolog.Logger) <-chan struct{} {
	out := make(chan struct{}, 1)
	if cfg.Path() == "" {
		return out
	}
	files := map[string]bool{filepath.Clean(cfg.Path()): true}
	for _, f := range cfg.UpstreamFiles {
		files[filepath.Clean(cfg.resolve(f.Path))] = true
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		log.Warn().Err(err).Msg("file watching unavailable: reload with SIGHUP")
		return out
	}
	dirs := map[string]bool{}
	for f := range files {
		d := filepath.Dir(f)
		if !dirs[d] {
			dirs[d] = true
			if err := w.Add(d); err != nil {
				log.Warn().Err(err).Str("dir", d).Msg("cannot watch directory")
			}
		}
	}
	go func() { // owner: caller's ctx; ends when ctx is done
		defer w.Close()
		var timer <-chan time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if files[filepath.Clean(ev.Name)] && ev.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename|fsnotify.Remove) != 0 {
					timer = time.After(300 * time.Millisecond)
				}
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				log.Warn().Err(err).Msg("file watch error")
			case <-timer:
				timer = nil
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}
