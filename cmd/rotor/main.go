// Command rotor is a forward SOCKS5 / HTTP CONNECT rotating proxy gateway.
// It parses flags, loads the config, wires the gateway and handles
// signals: SIGHUP (or a change of the config file) reloads, SIGTERM and
// SIGINT drain and exit 0.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster"
	"github.com/rotor-proxy/rotor/gateway"
	"github.com/rotor-proxy/rotor/internal/logbuf"
)

// version is stamped at build time with -ldflags "-X main.version=…".
var version = "dev"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rotor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file (default ./rotor.toml when present, else built-in defaults)")
	check := fs.Bool("check", false, "validate the config and exit: 0 when valid, 1 printing FILE:LINE: message per error")
	showVersion := fs.Bool("version", false, "print the version and exit")
	logFormat := fs.String("log-format", "json", "log format: json or console")
	logLevel := fs.String("log-level", "info", "least severe log lines written: debug (adds failed client handshakes and bad requests), info, warn or error")
	healthcheck := fs.Bool("healthcheck", false, "probe the admin listener's /healthz and exit 0 when healthy (for Docker HEALTHCHECK)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *showVersion {
		fmt.Fprintln(stdout, "rotor", version)
		return 0
	}
	var out io.Writer
	switch *logFormat {
	case "json":
		// Info lines (one per tunnel and per request) are written in
		// batches at most 100 ms old; warnings and errors at once.
		lw := logbuf.New(stderr, logbuf.MaxDelay)
		defer lw.Close()
		out = lw
	case "console":
		out = zerolog.ConsoleWriter{Out: stderr, TimeFormat: time.RFC3339}
	default:
		fmt.Fprintf(stderr, "rotor: -log-format must be json or console, not %q\n", *logFormat)
		return 2
	}
	level, err := zerolog.ParseLevel(*logLevel)
	if err != nil || *logLevel == "" || level < zerolog.DebugLevel || level > zerolog.ErrorLevel {
		fmt.Fprintf(stderr, "rotor: -log-level must be debug, info, warn or error, not %q\n", *logLevel)
		return 2
	}
	log := zerolog.New(out).Level(level).With().Timestamp().Logger()
	// go-redis has one process-wide logger (fleet mode): route it to ours.
	cluster.SetRedisLogger(log)

	cfg, err := loadConfig(*configPath)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if *check {
		if problems := cfg.CheckLists(); problems != nil {
			fmt.Fprintln(stderr, problems)
			return 1
		}
		fmt.Fprintf(stdout, "%s: ok\n", displayPath(cfg))
		return 0
	}
	if *healthcheck {
		return healthz(cfg, stderr)
	}

	// Signals are caught before the listeners open, so a SIGTERM that
	// arrives as soon as the ports accept still drains and exits 0.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	srv, err := gateway.New(cfg, gateway.Options{Log: log})
	if err != nil {
		log.Error().Err(err).Msg("start failed")
		return 1
	}
	if err := srv.Start(); err != nil {
		log.Error().Err(err).Msg("start failed")
		return 1
	}
	log.Info().Str("version", version).Str("config", displayPath(cfg)).Msg("rotor started")

	// Reloads run on their own goroutine until ctx ends (SIGTERM/SIGINT).
	done := make(chan struct{})
	go func() { // owner: run; ends when ctx is done
		defer close(done)
		srv.Watch(ctx, hup)
	}()
	<-ctx.Done()
	<-done
	log.Info().Dur("grace", srv.Config().ShutdownGrace).Msg("shutting down: draining tunnels")
	sctx, cancel := context.WithTimeout(context.Background(), srv.Config().ShutdownGrace)
	_ = srv.Shutdown(sctx)
	cancel()
	log.Info().Msg("stopped")
	return 0
}

// loadConfig loads path, or ./rotor.toml when present, or the defaults.
func loadConfig(path string) (*gateway.Config, error) {
	if path == "" {
		if _, err := os.Stat("rotor.toml"); err == nil {
			path = "rotor.toml"
		} else {
			return gateway.Defaults(), nil
		}
	}
	return gateway.LoadConfig(path)
}

func displayPath(cfg *gateway.Config) string {
	if cfg.Path() == "" {
		return "built-in defaults"
	}
	return cfg.Path()
}

// healthz asks the admin listener whether rotor is up.
func healthz(cfg *gateway.Config, stderr io.Writer) int {
	addr := cfg.Listen.Admin
	if addr == "" {
		fmt.Fprintln(stderr, "rotor: -healthcheck needs listen.admin")
		return 1
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	c := http.Client{Timeout: 3 * time.Second}
	req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/healthz", nil)
	if cfg.Listen.AdminToken != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Listen.AdminToken)
	}
	resp, err := c.Do(req)
	if err != nil {
		fmt.Fprintln(stderr, "rotor: unhealthy:", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(stderr, "rotor: unhealthy: /healthz answered", resp.Status)
		return 1
	}
	return 0
}
