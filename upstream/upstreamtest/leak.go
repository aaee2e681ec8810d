package upstreamtest

import (
	"runtime"
	"testing"
	"time"
)

// CheckGoroutines records the goroutine count now and, at cleanup, fails
// the test if more remain after a settle period of up to 5s. Call it first
// in a test (cleanups run last-in first-out, so it runs after the fakes
// close). Tests using it must not run in parallel.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			n := runtime.NumGoroutine()
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				buf = buf[:runtime.Stack(buf, true)]
				t.Errorf("goroutine leak: %d before, %d after\n%s", before, n, buf)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
