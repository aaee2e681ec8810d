package main

import (
	"syscall"
	"unsafe"
)

// setProcNofile sets both RLIMIT_NOFILE limits of another process with
// prlimit(2), so a spawned gateway runs under exactly the fd limit the
// issue's target names (20,000) whatever this tool raised its own to.
func setProcNofile(pid int, n uint64) error {
	lim := syscall.Rlimit{Cur: n, Max: n}
	_, _, e := syscall.RawSyscall6(syscall.SYS_PRLIMIT64, uintptr(pid),
		uintptr(syscall.RLIMIT_NOFILE), uintptr(unsafe.Pointer(&lim)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}
