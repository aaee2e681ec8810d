//go:build !linux

package upstream

import "time"

// threadCPU is unavailable here: benchmarks report no cpu-ns/op.
func threadCPU() time.Duration { return 0 }

func lockThread()   {}
func unlockThread() {}
