package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// rotorChild is a gateway binary this tool spawned and configured with the
// relay as its one upstream.
type rotorChild struct {
	*child
	ConfigPath    string
	LogPath       string
	StartEligible bool   // whether [pool] start_eligible was accepted
	Config        string // the TOML that was used
}

// rotorAddrs are the listen addresses written into the spawned config.
type rotorAddrs struct{ SOCKS5, HTTP, Admin string }

// rotorConfig renders the gateway config: loopback fronts, one socks5
// upstream (the relay), and a probe that fetches the tool's HTTP target
// through that upstream. Key names are the ones in CONTRACT.md.
func rotorConfig(a rotorAddrs, relayAddr, probeURL string, startEligible bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# written by rotor-bench; loopback only\nshutdown_grace = \"2s\"\n\n")
	fmt.Fprintf(&b, "[listen]\nsocks5 = %q\nhttp = %q\nadmin = %q\n\n", a.SOCKS5, a.HTTP, a.Admin)
	if startEligible {
		fmt.Fprintf(&b, "[pool]\nstart_eligible = true\n\n")
	}
	fmt.Fprintf(&b, "[probe]\nurl = %q\nexpect_status = [200]\ntimeout = \"5s\"\n\n", probeURL)
	fmt.Fprintf(&b, "[[upstream]]\nname = \"bench-relay\"\nurl = %q\n", "socks5://"+relayAddr)
	return b.String()
}

// spawnRotor writes the config (trying [pool] start_eligible first and
// dropping it if the binary rejects the key), starts "PATH -config FILE
// -log-format json" with stderr to logPath, caps its RLIMIT_NOFILE at
// nofile (0: inherit), and waits until ready(ctx) succeeds or 30 s pass.
func spawnRotor(ctx context.Context, path, dir, logPath string, a rotorAddrs, relayAddr, probeURL string,
	nofile uint64, ready func(context.Context) error, logf func(string, ...any)) (*rotorChild, error) {
	cfgPath := filepath.Join(dir, "rotor-bench.toml")
	variants := []bool{true, false}
	if ok, out := rotorCheck(ctx, path, cfgPath, rotorConfig(a, relayAddr, probeURL, true)); !ok {
		logf("rotor -check rejected [pool] start_eligible (%s); trying without", firstLine(out))
		if ok2, out2 := rotorCheck(ctx, path, cfgPath, rotorConfig(a, relayAddr, probeURL, false)); ok2 {
			variants = []bool{false}
		} else {
			logf("rotor -check also failed without it (%s); trying to start anyway", firstLine(out2))
		}
	}
	var lastErr error
	for _, se := range variants {
		cfg := rotorConfig(a, relayAddr, probeURL, se)
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
			return nil, err
		}
		rc, err := startRotor(ctx, path, cfgPath, logPath, nofile, ready)
		if err == nil {
			rc.StartEligible, rc.Config = se, cfg
			return rc, nil
		}
		lastErr = err
		logf("rotor did not become ready (start_eligible=%v): %v", se, err)
	}
	return nil, lastErr
}

// rotorCheck runs "PATH -config FILE -check" on cfg.
func rotorCheck(ctx context.Context, path, cfgPath, cfg string) (bool, string) {
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return false, err.Error()
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(cctx, path, "-config", cfgPath, "-check").CombinedOutput()
	return err == nil, string(out)
}

func startRotor(ctx context.Context, path, cfgPath, logPath string, nofile uint64,
	ready func(context.Context) error) (*rotorChild, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer lf.Close() // the child holds its own descriptor
	cmd := exec.Command(path, "-config", cfgPath, "-log-format", "json")
	cmd.Stdout, cmd.Stderr = lf, lf
	ch, err := startChild(cmd)
	if err != nil {
		return nil, err
	}
	rc := &rotorChild{child: ch, ConfigPath: cfgPath, LogPath: logPath}
	if nofile > 0 {
		if err := setProcNofile(ch.PID(), nofile); err != nil {
			rc.Stop(5 * time.Second)
			return nil, fmt.Errorf("prlimit: %w", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if ch.Exited() {
			return nil, fmt.Errorf("rotor exited (%v); log tail: %s", ch.err, logTail(logPath))
		}
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := ready(rctx)
		cancel()
		if err == nil {
			return rc, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			rc.Stop(5 * time.Second)
			return nil, fmt.Errorf("not ready after 30s: %v; log tail: %s", err, logTail(logPath))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeLoopbackAddr asks the kernel for a free 127.0.0.1 port. The port is
// released before use, which is racy but fine on a machine running a bench.
func freeLoopbackAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(bytes.TrimSpace(b))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if s == "" {
		return "no output"
	}
	return s
}

// isLoopbackAddr reports whether addr is host:port with a loopback IP
// literal or "localhost": everything this tool touches must be loopback.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
