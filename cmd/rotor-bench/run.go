package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"
)

// settle is the pause between measurements, so one run's tail (queued
// bytes, TIME_WAIT churn, GC) does not land in the next run's CPU figures.
const settle = 300 * time.Millisecond

// run starts the targets, the relay and (in spawn mode) the gateway, runs
// the selected phases, stops everything it started, and returns the report.
func run(ctx context.Context, o *options, logf func(string, ...any)) (*report, error) {
	rep := newReport(o)
	toolNofile, err := raiseNofile()
	if err != nil {
		rep.note("could not raise RLIMIT_NOFILE: %v", err)
	}
	tg, err := startTargets(o.HTTPTarget)
	if err != nil {
		return nil, fmt.Errorf("targets: %w", err)
	}
	defer tg.Close()
	e := &env{
		dur: o.Duration, bulkBytes: o.BulkBytes, idleHold: o.IdleHold, idleOpen: o.IdleTimeout, toolNofile: toolNofile,
		sourceAddr: tg.source.Addr(), echoAddr: tg.echo.Addr(), httpURL: tg.HTTPURL(),
	}

	// The relay: a child process (so /proc can read it) unless -relay-inproc.
	relayHTTP := ""
	if o.GatewayIsRelay || o.GatewayIsHop {
		relayHTTP = "127.0.0.1:0"
	}
	if o.RelayInProc {
		r, err := startRelay(o.RelayListen, relayHTTP, copyFuncs[o.RelayCopy])
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		defer r.Close()
		e.relayAddr = r.socks.Addr().String()
		if r.http != nil {
			relayHTTP = r.http.Addr().String()
		}
		rep.note("relay ran in-process: no relay CPU/RSS/fd figures")
	} else {
		r, err := startRelayChild(o.RelayListen, relayHTTP, o.RelayCopy)
		if err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
		defer r.Stop()
		e.relayAddr, e.relayPID, relayHTTP = r.SOCKSAddr, r.PID(), r.HTTPAddr
	}
	e.baseline = socks5Dialer{proxy: e.relayAddr}
	rep.Relay = e.relayAddr
	rep.note("relay copy mode %q (see -relay-copy)", o.RelayCopy)
	logf("relay on %s (pid %d), targets: source %s echo %s http %s", e.relayAddr, e.relayPID, e.sourceAddr, e.echoAddr, e.httpURL)

	gw := &rep.Gateway
	switch {
	case o.GatewayIsRelay:
		rep.Mode = "relay-as-gateway"
		gw.SOCKS5, gw.HTTP, gw.PID = e.relayAddr, relayHTTP, e.relayPID
		rep.note("plumbing run: the \"gateway\" is the relay itself (plus its test-only HTTP proxy); ratios only validate the tool")
	case o.GatewayIsHop:
		rep.Mode = "hop-as-gateway"
		h, err := startRelayChild("127.0.0.1:0", "127.0.0.1:0", o.RelayCopy, e.relayAddr, relayHTTP)
		if err != nil {
			return nil, fmt.Errorf("hop: %w", err)
		}
		defer h.Stop()
		gw.SOCKS5, gw.HTTP, gw.PID = h.SOCKSAddr, h.HTTPAddr, h.PID()
		rep.note("floor run: the \"gateway\" is a second relay process splicing bytes to the relay (the client's handshake passes through it); its ratios are what one more zero-copy hop costs on this machine, the floor under any gateway's")
	case o.SpawnRotor != "":
		rep.Mode = "spawn"
		rc, cleanup, err := spawnGateway(ctx, o, e, logf)
		if err != nil {
			return nil, err
		}
		defer cleanup()
		gw.Binary, gw.PID, gw.Config, gw.LogPath = o.SpawnRotor, rc.PID(), rc.Config, rc.LogPath
		gw.SOCKS5, gw.HTTP, gw.Admin, gw.StartEligible = o.SOCKS5, o.HTTP, o.Admin, &rc.StartEligible
	default:
		rep.Mode = "external"
		gw.SOCKS5, gw.HTTP, gw.Admin, gw.PID = o.SOCKS5, o.HTTP, o.Admin, o.GatewayPID
		if o.SOCKS5 == "" && o.HTTP == "" {
			rep.Mode = "baseline-only"
			rep.note("no gateway given: only baseline figures")
		}
	}
	e.gwPID, e.adminAddr = gw.PID, gw.Admin
	if lim, err := procNofile(e.gwPID); e.gwPID > 0 && err == nil {
		gw.Nofile = &lim
	}
	checkFronts(ctx, e, gw, rep, logf)
	runPhases(ctx, o, e, rep, logf)
	if ctx.Err() != nil {
		rep.note("interrupted: figures are partial")
	}
	rep.LoadEnd = loadAvg()
	rep.buildTable(o)
	return rep, nil
}

// spawnGateway picks free loopback ports for unset fronts and starts rotor.
func spawnGateway(ctx context.Context, o *options, e *env, logf func(string, ...any)) (*rotorChild, func(), error) {
	for _, a := range []*string{&o.SOCKS5, &o.HTTP, &o.Admin} {
		if *a == "" {
			free, err := freeLoopbackAddr()
			if err != nil {
				return nil, nil, err
			}
			*a = free
		}
	}
	dir, err := os.MkdirTemp("", "rotor-bench-")
	if err != nil {
		return nil, nil, err
	}
	logPath := o.RotorLog
	if logPath == "" {
		logPath = filepath.Join(dir, "rotor.log")
	}
	ready := func(ctx context.Context) error { return e.probeTunnel(ctx, socks5Dialer{proxy: o.SOCKS5}) }
	addrs := rotorAddrs{SOCKS5: o.SOCKS5, HTTP: o.HTTP, Admin: o.Admin}
	logf("spawning %s (socks5 %s, http %s, admin %s)", o.SpawnRotor, o.SOCKS5, o.HTTP, o.Admin)
	rc, err := spawnRotor(ctx, o.SpawnRotor, dir, logPath, addrs, e.relayAddr, e.httpURL, o.GatewayNofile, ready, logf)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("spawn rotor: %w", err)
	}
	logf("rotor ready (pid %d)", rc.PID())
	return rc, func() {
		rc.Stop(5 * time.Second)
		os.RemoveAll(dir)
	}, nil
}

// checkFronts proves each configured front with one tunnel and drops the
// ones that do not work, with a note.
func checkFronts(ctx context.Context, e *env, gw *gatewayInfo, rep *report, logf func(string, ...any)) {
	cands := []front{}
	if gw.SOCKS5 != "" {
		cands = append(cands, front{Name: "socks5", D: socks5Dialer{proxy: gw.SOCKS5}})
	}
	if gw.HTTP != "" {
		cands = append(cands, front{Name: "connect", D: connectDialer{proxy: gw.HTTP}})
	}
	for _, f := range cands {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := e.probeTunnel(pctx, f.D)
		cancel()
		if err != nil {
			rep.note("gateway %s front does not work (%v): its figures are skipped", f.Name, err)
			logf("gateway %s front: %v", f.Name, err)
			continue
		}
		e.fronts = append(e.fronts, f)
	}
	if gw.HTTP != "" && len(e.fronts) > 0 && e.fronts[len(e.fronts)-1].Name == "connect" {
		e.gwHTTP = gw.HTTP
	}
}

// runPhases runs the selected phases in phaseNames order. Within a round,
// the baseline runs right before the gateway paths, so drift on a noisy
// machine hits both about equally.
func runPhases(ctx context.Context, o *options, e *env, rep *report, logf func(string, ...any)) {
	if o.Only["idle"] && o.Idle > 0 && len(e.fronts) > 0 && ctx.Err() == nil {
		n := o.Idle
		// This process holds the client and the echo side of each tunnel;
		// the relay holds 2 fds per idle tunnel, or 6 with -relay-copy iocopy.
		perTool := 2
		if o.RelayInProc {
			perTool += 6 // the relay's share, at worst
		}
		if e.toolNofile > 0 && uint64(perTool*n+512) > e.toolNofile {
			n = int(e.toolNofile-512) / perTool
			rep.note("idle: this tool's RLIMIT_NOFILE %d only allows %d tunnels, not %d", e.toolNofile, n, o.Idle)
		}
		perRelay := int64(2)
		if o.RelayCopy == "iocopy" {
			perRelay = 6
		}
		if lim, err := procNofile(e.relayPID); e.relayPID > 0 && err == nil && lim > 0 && perRelay*int64(n)+256 > lim {
			n = int((lim - 256) / perRelay)
			rep.note("idle: the relay's RLIMIT_NOFILE %d only allows %d tunnels, not %d (run as root to raise it)", lim, n, o.Idle)
		}
		f := e.fronts[0]
		logf("idle: holding %d tunnels via %s", n, f.Name)
		rep.Idle = ptr(runIdle(ctx, e, f.Name, f.D, n))
		e.pause(ctx)
	}
	timed := o.Only["bulk"] || o.Only["parallel"] || o.Only["setup"] || o.Only["http"]
	if o.Warmup > 0 && timed && ctx.Err() == nil {
		warm := *e
		warm.dur, warm.warmup = o.Warmup, true
		runRound(ctx, o, &warm, &report{}, -1, func(string, ...any) {})
		logf("warm-up done (%s per path)", o.Warmup)
	}
	for round := range o.Rounds {
		runRound(ctx, o, e, rep, round, logf)
	}
}

// httpPath is one client path of the HTTP phase; a nil proxy is direct.
type httpPath struct {
	name  string
	proxy *url.URL
}

// runRound runs one round of the timed phases; round -1 is the warm-up.
func runRound(ctx context.Context, o *options, e *env, rep *report, round int, logf func(string, ...any)) {
	if o.Only["bulk"] {
		rep.Bulk = append(rep.Bulk, bulkPaths(ctx, e, 1, round, logf)...)
	}
	if o.Only["parallel"] {
		rep.Bulk = append(rep.Bulk, bulkPaths(ctx, e, o.Streams, round, logf)...)
	}
	if o.Only["setup"] {
		for _, p := range pathsOf(e) {
			if ctx.Err() != nil {
				break
			}
			logf("setup (round %d): %s, %d workers", round+1, p.Name, o.Workers)
			r := runSetup(ctx, e, p.Name, p.D, o.Workers)
			r.Round = round + 1
			logf("  %.0f tunnels/s, p50 %.2f ms, p99 %.2f ms, %d failures", r.Rate, r.P50Ms, r.P99Ms, r.Failures)
			rep.Setup = append(rep.Setup, r)
			e.pause(ctx)
		}
	}
	if o.Only["http"] {
		paths := []httpPath{{"direct", nil}, {"relay-socks5", &url.URL{Scheme: "socks5", Host: e.relayAddr}}}
		if e.gwHTTP != "" {
			paths = append(paths, httpPath{"gateway-http", &url.URL{Scheme: "http", Host: e.gwHTTP}})
		}
		for _, p := range paths {
			if ctx.Err() != nil {
				break
			}
			logf("http (round %d): %s, %d workers", round+1, p.name, o.Workers)
			r := runHTTP(ctx, e, p.name, p.proxy, o.Workers)
			r.Round = round + 1
			logf("  %.0f req/s, %d failures", r.Rate, r.Failures)
			rep.HTTP = append(rep.HTTP, r)
			e.pause(ctx)
		}
	}
}

// pause waits between measurements (not during the warm-up).
func (e *env) pause(ctx context.Context) {
	if !e.warmup {
		sleepCtx(ctx, settle)
	}
}

// pathsOf lists the baseline first, then the gateway fronts.
func pathsOf(e *env) []front {
	return append([]front{{Name: "baseline", D: e.baseline}}, e.fronts...)
}

func bulkPaths(ctx context.Context, e *env, streams, round int, logf func(string, ...any)) []bulkResult {
	var out []bulkResult
	for _, p := range pathsOf(e) {
		if ctx.Err() != nil {
			break
		}
		logf("bulk (round %d): %s, %d stream(s)", round+1, p.Name, streams)
		r := runBulk(ctx, e, p.Name, p.D, streams)
		r.Round = round + 1
		logf("  %.0f MB/s", r.MBps)
		out = append(out, r)
		e.pause(ctx)
	}
	return out
}

func ptr[T any](v T) *T { return &v }
