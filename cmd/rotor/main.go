// Command rotor is a forward SOCKS5 / HTTP CONNECT rotating proxy gateway.
// It parses flags, loads the config, wires the gateway and handles
// signals: SIGHUP (or a change of the config file) reloads, SIGTERM and
// SIGINT drain and exit 0; a second SIGTERM or SIGINT ends the drain at
// once and exits 128+signal (one within repeatWindow of the first is the
// same request, and ignored).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster"
	"github.com/rotor-proxy/rotor/gateway"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() {
	// A closed log pipe (`rotor 2> >(head -c 300)`) must not kill rotor:
	// Go dies of SIGPIPE on EPIPE to fd 1 or 2 unless SIGPIPE is handled.
	// Ignored, the write fails with EPIPE, the lost lines are counted
	// (logbuf), and rotor serves, drains and writes its state file.
	signal.Ignore(syscall.SIGPIPE)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr, signal.Notify))
}

// notifyFunc is signal.Notify; tests pass their own, which lets them send
// signals without signalling the test process.
type notifyFunc func(c chan<- os.Signal, sig ...os.Signal)

func run(args []string, stdout, stderr io.Writer, notify notifyFunc) int {
	fs := flag.NewFlagSet("rotor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed below: to stdout when asked for, else to stderr
	configPath := fs.String("config", "", "config file (default ./rotor.toml when present, else built-in defaults)")
	check := fs.Bool("check", false, "validate the config and exit: 0 when valid, 1 printing FILE:LINE: message per error")
	showVersion := fs.Bool("version", false, "print the version and exit")
	logFormat := fs.String("log-format", "json", "log format: json or console")
	logLevel := fs.String("log-level", "info", "least severe log lines written: debug (adds failed client handshakes and bad requests), info, warn or error")
	healthcheck := fs.Bool("healthcheck", false, "ask the running rotor's /healthz (at the admin address it recorded at start; else the config's listen.admin) and exit 0 when healthy (for Docker HEALTHCHECK)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(fs, stdout)
			return 0
		}
		usage(fs, stderr)
		return 2
	}
	if *check && *healthcheck {
		fmt.Fprintln(stderr, "rotor: -check and -healthcheck cannot be given together")
		usage(fs, stderr)
		return 2
	}
	if fs.NArg() > 0 {
		// Parsing stops at the first non-flag: whatever follows it would be
		// ignored, and `rotor check -config a.toml` would serve on defaults.
		hint := ""
		if fs.Lookup(fs.Arg(0)) != nil {
			hint = fmt.Sprintf(" (did you mean -%s?)", fs.Arg(0))
		}
		fmt.Fprintf(stderr, "rotor: unexpected argument %q%s: rotor takes flags only\n", fs.Arg(0), hint)
		usage(fs, stderr)
		return 2
	}
	// A bad flag value is a usage error whatever else is given: with
	// -version too, a typo in a unit file or script shows on its first run.
	if *logFormat != "json" && *logFormat != "console" {
		fmt.Fprintf(stderr, "rotor: -log-format must be json or console, not %q\n", *logFormat)
		return 2
	}
	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil || *logLevel == "" || level < zerolog.DebugLevel || level > zerolog.ErrorLevel {
		fmt.Fprintf(stderr, "rotor: -log-level must be debug, info, warn or error, not %q\n", *logLevel)
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "rotor", version)
		return 0
	}
	out, lw := logOutput(*logFormat, stderr)
	defer lw.Close()
	path, err := configFile(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, "rotor:", err)
		return 1
	}
	if *healthcheck {
		// Asks the running rotor, not the file on disk (gateway.Healthcheck).
		if err := gateway.Healthcheck(path); err != nil {
			fmt.Fprintln(stderr, "rotor: unhealthy:", err)
			return 1
		}
		return 0
	}
	log := zerolog.New(out).Level(level).With().Timestamp().Logger()
	// go-redis has one process-wide logger (fleet mode): route it to ours.
	cluster.SetRedisLogger(log)

	if *check {
		// Every problem of the file and its list files, in one run.
		if path != "" {
			if err := gateway.CheckConfig(path); err != nil {
				fmt.Fprintln(stderr, err)
				return 1
			}
		}
		// The built-in defaults set no probe.url either: they get the
		// same warnings as a file.
		if cfg, err := loadConfig(path); err == nil {
			if cfg.Probe.URL == "" {
				fmt.Fprintf(stderr, "%s: warning: no [probe] url: cooled upstreams are re-admitted when their cooldown ends, and new ones serve, without a probe\n", displayPath(cfg))
			}
			for _, w := range cfg.Warnings() {
				fmt.Fprintf(stderr, "%s: warning: %s\n", displayPath(cfg), w)
			}
		}
		fmt.Fprintf(stdout, "%s: ok\n", displayPathOf(path))
		return 0
	}
	cfg, err := loadConfig(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}

	// Signals are caught before the listeners open, so a SIGTERM that
	// arrives as soon as the ports accept still drains and exits 0.
	sigs := make(chan os.Signal, 4)
	notify(sigs, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)

	srv, err := gateway.New(cfg, gateway.Options{Log: log, RunRecord: gateway.RunRecordPath(cfg.Path()), LogDropped: lw.Dropped})
	if err != nil {
		log.Error().Err(err).Msg("start failed")
		return 1
	}
	if err := srv.Start(); err != nil {
		log.Error().Err(err).Msg("start failed")
		return 1
	}
	log.Info().Str("version", version).Str("config", displayPath(cfg)).Msg("rotor started")
	for _, w := range cfg.Warnings() {
		log.Warn().Str("config", displayPath(cfg)).Msg(w)
	}

	// Reloads run on their own goroutine until SIGTERM/SIGINT.
	ctx, stopWatch := context.WithCancel(context.Background())
	hup := make(chan os.Signal, 1)
	done := make(chan struct{})
	go func() { // owner: run; ends when stopWatch is called
		defer close(done)
		srv.Watch(ctx, hup)
	}()
	first := <-sigs
	for first == syscall.SIGHUP {
		select {
		case hup <- first:
		default: // a reload is already queued
		}
		first = <-sigs
	}
	at := time.Now()
	stopWatch()
	<-done
	return drain(srv, sigs, first, at, log)
}

// usage prints how to call rotor and every flag to w.
func usage(fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintln(w, "Usage: rotor [-config FILE] [-check | -healthcheck | -version] [flags]")
	fs.SetOutput(w)
	fs.PrintDefaults()
}
