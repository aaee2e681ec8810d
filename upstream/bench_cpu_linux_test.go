package upstream

import (
	"runtime"
	"syscall"
	"time"
)

// threadCPU returns the CPU time of the calling OS thread (the benchmark
// locks its goroutine to one), so a benchmark can report CPU per op that a
// busy shared machine does not inflate the way it inflates wall time.
func threadCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func lockThread()   { runtime.LockOSThread() }
func unlockThread() { runtime.UnlockOSThread() }
