package gateway

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// stateBlocked is the error of a write refused because of what is at
// path (blockState).
func stateBlocked(path string, why error) error {
	return fmt.Errorf("state file %s not written: %w", path, why)
}

// stateUnwritable is the error of a state file at path that cannot be
// written because of its directory (stateDirError).
func stateUnwritable(path string, dirErr error) error {
	return fmt.Errorf("state file %s cannot be written: %w", path, dirErr)
}

// stateDirError reports why no state file can be written at path, or
// nil: the directory it goes in, or when that is missing the nearest of
// its parents that exists (writeFileAtomic makes the rest), is not a
// directory, cannot be looked at, or takes no new file (ownership, mode,
// a read-only mount). It tries as each write does, creating and removing
// a temporary file there, so that whatever decides for the writer
// (ACLs, root, a read-only mount) decides here too.
func stateDirError(path string) error {
	dir := filepath.Dir(path)
	at := dir
	for {
		info, err := os.Stat(at)
		if err == nil {
			if !info.IsDir() {
				return fmt.Errorf("%s is not a directory", at)
			}
			break
		}
		// ENOTDIR: a parent of at is a file, found further up.
		if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("directory %s cannot be looked at: %w", at, pathCause(err))
		}
		up := filepath.Dir(at)
		if up == at {
			return fmt.Errorf("directory %s: %w", at, pathCause(err))
		}
		at = up
	}
	f, err := os.CreateTemp(at, ".rotor-check-*")
	if err != nil {
		if at != dir {
			return fmt.Errorf("directory %s does not exist and cannot be made in %s: %w", dir, at, pathCause(err))
		}
		return fmt.Errorf("cannot create a file in directory %s: %w", dir, pathCause(err))
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return nil
}

// stateFileError is -check's look at a state file at path: what would
// keep rotor from ever writing it, or nil. Besides stateDirError's
// reasons, a directory at path, or a file there that cannot be read
// (rotor neither restores nor writes over one: loadState).
func stateFileError(path string) error {
	info, err := os.Stat(path)
	switch {
	case err == nil && info.IsDir():
		return errors.New("it is a directory")
	case err == nil:
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("it exists and cannot be read (%w): rotor would neither restore it nor write over it", pathCause(err))
		}
		_ = f.Close()
	}
	if derr := stateDirError(path); derr != nil {
		return derr
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("it cannot be looked at: %w", pathCause(err))
	}
	return nil
}

// pathCause is the cause of a *fs.PathError or *os.LinkError without the
// path, for a message that names the path its own way (or not at all:
// a temporary file's name changes at every write).
func pathCause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
