// Command rotor-bench is rotor's load tool (issue 8). It starts its own
// loopback targets and its own SOCKS5 upstream relay, drives a gateway
// whose fronts are given by flags (or that it spawns itself), and measures
// every figure twice in the same run: through the gateway, and with the
// client talking straight to the relay (the baseline). All traffic stays on
// loopback and every phase stops by itself.
//
// Usage:
//
//	rotor-bench -spawn-rotor ./rotor [-json out.json]    # spawn and configure rotor
//	rotor-bench -relay-listen 127.0.0.1:19080 -socks5 127.0.0.1:1080 -http 127.0.0.1:8080 [-gateway-pid PID]
//	rotor-bench -gateway-is-relay                       # plumbing run, no gateway
//	rotor-bench relay -listen 127.0.0.1:19080           # the relay alone
//
// It owns nothing of the gateway: it never imports rotor's packages, so it
// measures the binary a user would run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// options are the parsed flags.
type options struct {
	SOCKS5, HTTP, Admin string
	GatewayPID          int
	SpawnRotor          string
	RotorLog            string
	GatewayNofile       uint64
	GatewayIsRelay      bool
	GatewayIsHop        bool
	RelayListen         string
	RelayInProc         bool
	RelayCopy           string
	HTTPTarget          string
	Duration            time.Duration
	BulkBytes           int64
	Streams, Workers    int
	Idle                int
	IdleHold            time.Duration
	IdleTimeout         time.Duration
	Rounds              int
	Warmup              time.Duration
	Only                map[string]bool
	JSON                string
	Commit              string
	CommitDirty         bool
	args                []string
	values              map[string]string // every flag's value, for the report
}

// phaseNames are the values -only accepts, in run order. idle runs first
// so the gateway's RSS baseline is not inflated by heap freed after churn.
var phaseNames = []string{"idle", "bulk", "parallel", "setup", "http"}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "relay" {
		os.Exit(relayMain(os.Args[2:]))
	}
	os.Exit(benchMain(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{args: args}
	fs := flag.NewFlagSet("rotor-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.SOCKS5, "socks5", "", "gateway SOCKS5 front (spawn mode: listen address to configure; default a free port)")
	fs.StringVar(&o.HTTP, "http", "", "gateway HTTP front, CONNECT and absolute-URI (spawn mode: as -socks5)")
	fs.StringVar(&o.Admin, "admin", "", "gateway admin address, read for go_goroutines on /metrics (spawn mode: as -socks5)")
	fs.IntVar(&o.GatewayPID, "gateway-pid", 0, "PID of an externally started gateway, for /proc CPU, RSS and fd figures")
	fs.StringVar(&o.SpawnRotor, "spawn-rotor", "", "path of a rotor binary to configure, start and stop (spawn mode)")
	fs.StringVar(&o.RotorLog, "rotor-log", "", "spawn mode: file for rotor's stderr (default: in a temp dir, removed)")
	fs.Uint64Var(&o.GatewayNofile, "gateway-nofile", 20000, "spawn mode: RLIMIT_NOFILE set on rotor with prlimit (0: inherit)")
	fs.BoolVar(&o.GatewayIsRelay, "gateway-is-relay", false, "plumbing run: use the relay itself as the \"gateway\" (no gateway measured)")
	fs.BoolVar(&o.GatewayIsHop, "gateway-is-hop", false, "floor run: a second relay process that only splices bytes to the relay stands in as the gateway (one more zero-copy hop, no proxy work)")
	fs.StringVar(&o.RelayListen, "relay-listen", "127.0.0.1:0", "relay listen address; fix it when the gateway is configured by hand")
	fs.BoolVar(&o.RelayInProc, "relay-inproc", false, "run the relay in this process (tests; no relay CPU/RSS figures)")
	fs.StringVar(&o.RelayCopy, "relay-copy", "idle", "relay copy mode: idle (splice, no pipe parked on idle tunnels: 2 fds each) or iocopy (plain io.Copy: 6 fds each)")
	fs.StringVar(&o.HTTPTarget, "http-target", "127.0.0.1:0", "HTTP target listen address (fix it to point a hand-made probe.url at it)")
	fs.DurationVar(&o.Duration, "duration", 5*time.Second, "length of every timed measurement")
	fs.Int64Var(&o.BulkBytes, "bulk-bytes", 0, "byte budget per bulk measurement, split across streams (0: until -duration)")
	fs.IntVar(&o.Streams, "streams", 32, "parallel streams for the aggregate bulk figure")
	fs.IntVar(&o.Workers, "workers", 32, "concurrent workers for the setup and HTTP phases")
	fs.IntVar(&o.Idle, "idle", 5000, "idle tunnels to hold")
	fs.DurationVar(&o.IdleHold, "idle-hold", 2*time.Second, "how long idle tunnels are held before RSS and fds are read")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", 30*time.Second, "bound on opening all idle tunnels; the rest count as failures")
	fs.IntVar(&o.Rounds, "rounds", 1, "repeat bulk/parallel/setup/http, alternating baseline and gateway; tables use medians")
	fs.DurationVar(&o.Warmup, "warmup", time.Second, "untimed run of every path before the first round of each phase (0: none)")
	only := fs.String("only", strings.Join(phaseNames, ","), "phases to run: "+strings.Join(phaseNames, ","))
	fs.StringVar(&o.JSON, "json", "", "also write the results as JSON to this file")
	fs.StringVar(&o.Commit, "commit", "", "commit the measured binary was built from (default: git rev-parse HEAD when the run starts)")
	fs.BoolVar(&o.CommitDirty, "commit-dirty", false, "with -commit: the build had uncommitted changes")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.values = map[string]string{}
	fs.VisitAll(func(f *flag.Flag) { o.values[f.Name] = f.Value.String() })
	o.Only = map[string]bool{}
	for _, p := range strings.Split(*only, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !contains(phaseNames, p) {
			return nil, fmt.Errorf("-only: unknown phase %q", p)
		}
		o.Only[p] = true
	}
	for name, a := range map[string]string{"socks5": o.SOCKS5, "http": o.HTTP, "admin": o.Admin,
		"relay-listen": o.RelayListen, "http-target": o.HTTPTarget} {
		if a != "" && !isLoopbackAddr(a) {
			return nil, fmt.Errorf("-%s %s: only loopback addresses are allowed", name, a)
		}
	}
	if _, ok := copyFuncs[o.RelayCopy]; !ok {
		return nil, fmt.Errorf("-relay-copy: want idle or iocopy, got %q", o.RelayCopy)
	}
	modes := 0
	for _, on := range []bool{o.SpawnRotor != "", o.GatewayIsRelay, o.GatewayIsHop, o.SOCKS5 != "" && o.SpawnRotor == "" || o.HTTP != "" && o.SpawnRotor == ""} {
		if on {
			modes++
		}
	}
	if modes > 1 {
		return nil, fmt.Errorf("choose one of -spawn-rotor, -gateway-is-relay, -gateway-is-hop, or -socks5/-http of a running gateway")
	}
	if o.Duration <= 0 || o.Duration > 10*time.Minute || o.Rounds < 1 || o.Rounds > 20 ||
		o.Streams < 1 || o.Workers < 1 || o.Idle < 0 || o.Idle > 100000 {
		return nil, fmt.Errorf("flag out of range (duration 0-10m, rounds 1-20, streams/workers >= 1, idle 0-100000)")
	}
	return o, nil
}

func benchMain(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(stderr, "rotor-bench:", err)
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, "%s rotor-bench: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, a...))
	}
	rep, err := run(ctx, o, logf)
	if err != nil {
		fmt.Fprintln(stderr, "rotor-bench:", err)
		return 1
	}
	rep.WriteText(stdout)
	if o.JSON != "" {
		if err := rep.WriteJSONFile(o.JSON); err != nil {
			fmt.Fprintln(stderr, "rotor-bench:", err)
			return 1
		}
	}
	return 0
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
