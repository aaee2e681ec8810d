package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// setAside renames a state file rotor will not write over (corrupt, or unread) to <path>.<why>-<UTC timestamp>
// without replacing an earlier one, and returns the new name.
func (s *Server) setAside(path, why string) (string, error) {
	base := path + "." + why + "-" + s.clock.Now().UTC().Format("20060102T150405Z")
	for i := 0; i < 100; i++ {
		aside := base
		if i > 0 {
			aside = fmt.Sprintf("%s.%d", base, i)
		}
		if _, err := os.Lstat(aside); err == nil {
			continue
		}
		if err := os.Rename(path, aside); err != nil {
			return "", err
		}
		_ = syncDir(filepath.Dir(path))
		return aside, nil
	}
	return "", errors.New("too many set-aside files")
}

// writeFileAtomic replaces path with data: a temporary file in the same
// directory, fsync, rename, fsync of the directory (so the rename itself
// survives a crash).
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("create a temporary file in %s: %w", dir, pathCause(err))
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	// The errors leave out the temporary file's name, new at every write,
	// so that writeState can tell a failure repeating from a new one.
	step := func(what string, e error) error {
		return fmt.Errorf("%s the temporary file in %s: %w", what, dir, pathCause(e))
	}
	if err = f.Chmod(perm); err != nil {
		return step("chmod", err)
	}
	if _, err = f.Write(data); err != nil {
		return step("write", err)
	}
	if err = f.Sync(); err != nil {
		return step("sync", err)
	}
	if err = f.Close(); err != nil {
		return step("close", err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename the temporary file over %s: %w", path, pathCause(err))
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory so that a rename in it is durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
