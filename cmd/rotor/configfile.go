package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/rotor-proxy/rotor/gateway"
)

// loadConfig loads path, or the defaults when path is "" (configFile).
func loadConfig(path string) (*gateway.Config, error) {
	if path == "" {
		return gateway.Defaults(), nil
	}
	return gateway.LoadConfig(path)
}

// configFile is the file rotor runs from: path, else ./rotor.toml when
// present, else "" (built-in defaults). Only a ./rotor.toml that does not
// exist at all means the defaults: a symlink to nothing, or one rotor may
// not look at, is an error, so that rotor never serves on the defaults
// (which let the direct upstream reach private addresses) in place of the
// config it was meant to read.
func configFile(path string) (string, error) {
	const local = "rotor.toml"
	if path != "" {
		return path, nil
	}
	if _, err := os.Lstat(local); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	if _, err := os.Stat(local); err != nil {
		target, _ := os.Readlink(local)
		return "", fmt.Errorf("%s is a symlink to %s, which cannot be read (%w)", local, target, err)
	}
	return local, nil
}

func displayPath(cfg *gateway.Config) string { return displayPathOf(cfg.Path()) }

// displayPathOf names the config file path for people: "built-in
// defaults" when there is none.
func displayPathOf(path string) string {
	if path == "" {
		return "built-in defaults"
	}
	return path
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
