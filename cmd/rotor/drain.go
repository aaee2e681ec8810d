package main

import (
	"context"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rotor-proxy/rotor/gateway"
	"github.com/rs/zerolog"
)

// repeatWindow is how soon after the first a second SIGTERM or SIGINT is
// taken as the same request, not a second one: GNU timeout (and other
// supervisors) signal the process and then its process group, so rotor
// gets SIGTERM twice within microseconds, and the drain ended at once.
// A variable so that tests on a loaded machine, where the second of two
// signals sent together can be read later than this, can widen it.
var repeatWindow = 100 * time.Millisecond

// drain shuts srv down within shutdown_grace. A second SIGTERM or SIGINT
// (at least repeatWindow after the first, received at at) ends the drain
// at once: open tunnels are closed, the state file is written, and the
// exit code is 128+signal, as for a process the signal killed, so a
// supervisor sees the drain was cut short.
func drain(srv *gateway.Server, sigs <-chan os.Signal, first os.Signal, at time.Time, log zerolog.Logger) int {
	grace := srv.Config().ShutdownGrace
	log.Info().Str("signal", first.String()).Dur("grace", grace).Msg("shutting down: draining tunnels")
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	code := 0
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owner: drain; ends when Shutdown has returned or at a second signal
		defer wg.Done()
		for {
			select {
			case <-stopped:
				return
			case sig := <-sigs:
				if sig == syscall.SIGHUP {
					log.Info().Str("signal", sig.String()).Msg("reload ignored: rotor is draining") // no reloads while draining
					continue
				}
				if time.Since(at) < repeatWindow {
					log.Info().Str("signal", sig.String()).Msg("signal repeated at once: ignored (one sent later ends the drain)")
					continue
				}
				log.Warn().Str("signal", sig.String()).Msg("second signal: ending the drain now")
				code = 1
				if n, ok := sig.(syscall.Signal); ok {
					code = 128 + int(n)
				}
				cancel()
				return
			}
		}
	}()
	_ = srv.Shutdown(ctx)
	close(stopped)
	wg.Wait()
	log.Info().Int("exit", code).Msg("stopped")
	return code
}
