package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// drainTarget accepts connections and keeps each open until its peer
// closes it.
func drainTarget(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() { // owner: the test; ends when ln is closed
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); _, _ = io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// drainTunnel opens a CONNECT tunnel to target through the HTTP front.
func drainTunnel(t *testing.T, front, target string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT %s: %v %v", target, resp, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c
}

func drainGet(admin, path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + admin + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

const drainConf = "allow_private_destinations = true\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n" +
	"[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"

// TestShutdownKeepsAdminUpThroughDrain: the admin listener closed as soon
// as the drain began, so /metrics and /healthz were unreachable for all of
// it. It stays up, /healthz answering 503 "shutting down", and closes
// last; cancelling the drain's ctx (a second signal) ends it at once.
func TestShutdownKeepsAdminUpThroughDrain(t *testing.T) {
	srv, logs := newGateway(t, "drain.toml", drainConf)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	admin, socks := srv.Addr("admin"), srv.Addr("socks5")
	tunnel := drainTunnel(t, srv.Addr("http"), drainTarget(t))
	// The client reads the CONNECT 200 a moment before the tunnel is
	// counted: wait for the count, or the check during the drain flakes.
	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		if _, body, err := drainGet(admin, "/metrics"); err == nil && strings.Contains(body, `rotor_tunnels_active{front="http"} 1`) {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the open tunnel never counted in /metrics")
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shut := make(chan struct{})
	go func() { defer close(shut); _ = srv.Shutdown(ctx) }()

	for start := time.Now(); ; time.Sleep(10 * time.Millisecond) {
		code, body, err := drainGet(admin, "/healthz")
		if err != nil {
			t.Fatalf("admin listener unreachable during the drain: %v", err)
		}
		if code == http.StatusServiceUnavailable {
			if body != "shutting down\n" {
				t.Errorf("/healthz during the drain = %q, want \"shutting down\"", body)
			}
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("/healthz still %d 10s into the drain", code)
		}
	}
	if code, body, err := drainGet(admin, "/metrics"); err != nil || code != http.StatusOK || !strings.Contains(body, `rotor_tunnels_active{front="http"} 1`) {
		t.Errorf("/metrics during the drain: %d %v, want 200 with the open tunnel counted", code, err)
	}
	if c, err := net.DialTimeout("tcp", socks, time.Second); err == nil {
		c.Close()
		t.Error("socks5 front still accepting during the drain")
	}
	select {
	case <-shut:
		t.Fatal("Shutdown returned with a tunnel open and its ctx alive")
	default:
	}

	cancel() // a second signal
	select {
	case <-shut:
	case <-time.After(10 * time.Second):
		t.Fatalf("Shutdown still running 10s after its ctx was cancelled\n%s", logs)
	}
	if !strings.Contains(logs.String(), "drain ended early") {
		t.Errorf("the cut-short drain was not logged:\n%s", logs)
	}
	if _, _, err := drainGet(admin, "/healthz"); err == nil {
		t.Error("admin listener still up after Shutdown returned")
	}
	_ = tunnel.SetReadDeadline(time.Now().Add(5 * time.Second))
	var ne net.Error
	if _, err := io.ReadAll(tunnel); errors.As(err, &ne) && ne.Timeout() {
		t.Error("the open tunnel was not closed")
	}
}

// TestRunRecord: Start records the bound admin address for
// `rotor -healthcheck`, which then asks the running server even when the
// config file says otherwise; Shutdown removes the record.
func TestRunRecord(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	path := t.TempDir() + "/rotor.toml"
	// The file names an admin address nothing listens on.
	if err := os.WriteFile(path, []byte(strings.Replace(drainConf, `admin = "127.0.0.1:0"`, `admin = "127.0.0.1:1"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfig(path, []byte(drainConf))
	if err != nil {
		t.Fatal(err)
	}
	rec := RunRecordPath(path)
	srv, err := New(cfg, Options{Log: zerolog.Nop(), RunRecord: rec})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	if got, ok := recordedAdmin(path); !ok || got != srv.Addr("admin") {
		t.Errorf("recordedAdmin = %q %v, want %s", got, ok, srv.Addr("admin"))
	}
	if err := Healthcheck(path); err != nil {
		t.Errorf("Healthcheck of the running server: %v", err)
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(rec); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record left after Shutdown: %v", err)
	}
	if err := Healthcheck(path); err == nil || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Errorf("Healthcheck with no running server = %v, want the file's listen.admin refused", err)
	}

	// A record whose process is gone is ignored.
	stale, _ := json.Marshal(runRecord{PID: 1 << 30, Config: runRecordKey(path), Admin: "127.0.0.1:2"})
	if err := os.WriteFile(rec, stale, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, ok := recordedAdmin(path); ok {
		t.Errorf("recordedAdmin took a dead process's record: %q", got)
	}
}
