//go:build !linux

package main

import "errors"

// setProcNofile is Linux-only; elsewhere the gateway keeps its inherited limit.
func setProcNofile(pid int, n uint64) error {
	return errors.New("prlimit: only supported on Linux")
}
