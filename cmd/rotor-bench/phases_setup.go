package main

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// setupResult is one tunnel-churn measurement through one path.
type setupResult struct {
	Path       string  `json:"path"`
	Round      int     `json:"round"` // 1-based; 0 is the warm-up
	Workers    int     `json:"workers"`
	Tunnels    int     `json:"tunnels"` // usable tunnels completed
	Failures   int     `json:"failures"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"tunnels_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	cpuUse
	GatewayCPUPerTunnelMs *float64 `json:"gateway_cpu_ms_per_tunnel"`
	RelayCPUPerTunnelMs   *float64 `json:"relay_cpu_ms_per_tunnel"`
	// fd counts sampled every 20 ms during the churn, and once more 1 s
	// after it ended (closes propagated?). Null when the process is unknown.
	GatewayFDsBefore *int `json:"gateway_fds_before"`
	GatewayFDsPeak   *int `json:"gateway_fds_peak"`
	GatewayFDsAfter  *int `json:"gateway_fds_after"`
	RelayFDsPeak     *int `json:"relay_fds_peak"`
}

// echoSize is the payload that proves a tunnel usable (issue 8: 64 bytes).
const echoSize = 64

// runSetup runs workers loops for -duration; each iteration opens a
// tunnel to the echo target through d, echoes 64 bytes, and closes it. The
// latency of one tunnel is "time to a usable tunnel": TCP connect to the
// front, proxy handshake, and the first echo round trip. A tunnel that
// fails or takes over 10 s counts as a failure.
func runSetup(ctx context.Context, e *env, path string, d tunnelDialer, workers int) setupResult {
	res := setupResult{Path: path, Workers: workers}
	var errs errList
	fdsBefore := sampleProc(e.gwPID)
	stopFDs := e.watchFDs()
	mark := e.mark()
	start := time.Now()
	end := start.Add(e.dur)
	lats := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() { // ends when the phase deadline passes
			defer wg.Done()
			lats[w] = churn(ctx, e, d, end, &errs)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.cpuUse = e.since(mark)
	gwPeak, relayPeak := stopFDs()

	all := slices.Concat(lats...)
	slices.Sort(all)
	res.Tunnels, res.Failures, res.FirstError = len(all), errs.n, errs.first
	res.Seconds = elapsed.Seconds()
	res.Rate = float64(res.Tunnels) / res.Seconds
	res.P50Ms, res.P99Ms = ms(quantile(all, 0.50)), ms(quantile(all, 0.99))
	if len(all) > 0 {
		res.MaxMs = ms(all[len(all)-1])
	}
	res.GatewayCPUPerTunnelMs = divOpt(mulOpt(res.GatewaySec, 1000), float64(res.Tunnels))
	res.RelayCPUPerTunnelMs = divOpt(mulOpt(res.RelaySec, 1000), float64(res.Tunnels))
	if fdsBefore.ok {
		res.GatewayFDsBefore = &fdsBefore.FDs
		res.GatewayFDsPeak = gwPeak
		if !e.warmup {
			sleepCtx(ctx, time.Second)
		}
		if s := sampleProc(e.gwPID); s.ok {
			res.GatewayFDsAfter = &s.FDs
		}
	}
	res.RelayFDsPeak = relayPeak
	return res
}

// churn is one setup worker's loop.
func churn(ctx context.Context, e *env, d tunnelDialer, end time.Time, errs *errList) []time.Duration {
	lats := make([]time.Duration, 0, 4096)
	payload := make([]byte, echoSize)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	scratch := make([]byte, echoSize)
	for ctx.Err() == nil {
		t0 := time.Now()
		if t0.After(end) {
			break
		}
		deadline := t0.Add(10 * time.Second)
		dctx, cancel := context.WithDeadline(ctx, deadline)
		c, err := d.DialTunnel(dctx, e.echoAddr)
		cancel()
		if err == nil {
			err = echoOnce(c, payload, scratch, deadline)
			if err == nil {
				lats = append(lats, time.Since(t0))
			}
			c.Close()
		}
		if err != nil {
			errs.add(err)
		}
	}
	return lats
}

// watchFDs samples the fd counts of the gateway and the relay every 20 ms
// until the returned stop func is called; stop returns the peaks (nil when
// the process is unknown) after the sampling goroutine has ended.
func (e *env) watchFDs() func() (gw, relay *int) {
	stop := make(chan struct{})
	done := make(chan struct{})
	gwPeak, relayPeak := -1, -1
	go func() { // owned by the returned stop func, which waits for it
		defer close(done)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if n, err := procFDs(e.gwPID); e.gwPID > 0 && err == nil {
				gwPeak = max(gwPeak, n)
			}
			if n, err := procFDs(e.relayPID); e.relayPID > 0 && err == nil {
				relayPeak = max(relayPeak, n)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() (*int, *int) {
		close(stop)
		<-done
		return intOpt(gwPeak), intOpt(relayPeak)
	}
}

// quantile returns the q-quantile of sorted (nearest rank), 0 when empty.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func intOpt(v int) *int {
	if v < 0 {
		return nil
	}
	return &v
}
