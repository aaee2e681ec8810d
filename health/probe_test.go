package health

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// rawServer accepts on 127.0.0.1:0 and hands each conn to serve.
func rawServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // exits when the listener closes in Cleanup
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func runProbeSpec(t *testing.T, c ProbeConfig, d Dialer) error {
	t.Helper()
	p, err := newProbeSpec(c.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.run(t.Context(), d, RealClock())
	return err
}

func TestProbeHTTP(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Method != http.MethodGet || r.URL.RequestURI() != "/health?x=1" || !strings.HasPrefix(r.Host, "127.0.0.1:") {
			http.Error(w, "bad probe request", http.StatusBadRequest)
			return
		}
		switch r.URL.Query().Get("x") {
		case "1":
			fmt.Fprint(w, "rotor-probe-ok")
		}
	}))
	t.Cleanup(srv.Close)
	direct := &net.Dialer{}
	url := srv.URL + "/health?x=1"
	tests := []struct {
		name  string
		cfg   ProbeConfig
		class Class // ClassNone: must pass
	}{
		{"status 200 passes", ProbeConfig{URL: url}, ClassNone},
		{"body substring passes", ProbeConfig{URL: url, ExpectBody: "probe-ok"}, ClassNone},
		{"body substring missing fails", ProbeConfig{URL: url, ExpectBody: "nope"}, UpstreamError},
		{"unexpected status fails", ProbeConfig{URL: srv.URL + "/other"}, UpstreamError},
		{"status in expect list passes", ProbeConfig{URL: srv.URL + "/other", ExpectStatus: []int{400}}, ClassNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runProbeSpec(t, tt.cfg, direct)
			if tt.class == ClassNone {
				if err != nil {
					t.Fatalf("probe failed: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("probe passed")
			}
			if got := classifyProbe(err); got != tt.class {
				t.Errorf("class = %v (%v), want %v", got, err, tt.class)
			}
		})
	}
	var se *StatusError
	if err := runProbeSpec(t, ProbeConfig{URL: srv.URL + "/other"}, direct); !errors.As(err, &se) || se.StatusCode != 400 {
		t.Errorf("status error: %v", err)
	}
	if hits.Load() == 0 {
		t.Error("target saw no probe")
	}
}

func TestProbeHTTPS(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "no tls", http.StatusBadRequest)
		}
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted case logs a handshake error
	srv.StartTLS()
	t.Cleanup(srv.Close)
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	if err := runProbeSpec(t, ProbeConfig{URL: srv.URL + "/", TLS: &tls.Config{RootCAs: roots}}, &net.Dialer{}); err != nil {
		t.Fatalf("https probe: %v", err)
	}
	// Without the test root the certificate is rejected.
	err := runProbeSpec(t, ProbeConfig{URL: srv.URL + "/"}, &net.Dialer{})
	if err == nil || classifyProbe(err) != UpstreamError {
		t.Errorf("untrusted certificate: %v", err)
	}
}

func TestProbeTCPConnectAloneFails(t *testing.T) {
	tests := []struct {
		name  string
		serve func(net.Conn)
		class Class
	}{
		{"accept then close", func(c net.Conn) {}, UpstreamError},
		{"garbage", func(c net.Conn) { io.WriteString(c, "\x05\xff not http at all\r\n\r\n") }, UpstreamError},
		{"read request then close", func(c net.Conn) { c.Read(make([]byte, 512)) }, UpstreamError},
		{"status line only", func(c net.Conn) { c.Read(make([]byte, 512)); io.WriteString(c, "HTTP/1.1 200 OK\r\n") }, UpstreamError},
		{"endless header", func(c net.Conn) {
			c.Read(make([]byte, 512))
			io.WriteString(c, "HTTP/1.1 200 OK\r\nX: ")
			io.WriteString(c, strings.Repeat("a", maxProbeHeader+10))
		}, UpstreamError},
		{"silence", func(c net.Conn) { c.Read(make([]byte, 512)); c.Read(make([]byte, 1)) }, Timeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, tt.serve)
			// Only the silent peer needs the timeout; the others fail on
			// their own well within the default 5s, even on a loaded host.
			timeout := time.Duration(0)
			if tt.class == Timeout {
				timeout = 200 * time.Millisecond
			}
			err := runProbeSpec(t, ProbeConfig{URL: "http://" + addr + "/", Timeout: timeout}, &net.Dialer{})
			if err == nil {
				t.Fatal("probe passed on a bare TCP connect")
			}
			if got := classifyProbe(err); got != tt.class {
				t.Errorf("class = %v (%v), want %v", got, err, tt.class)
			}
		})
	}
}

func TestProbeRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = runProbeSpec(t, ProbeConfig{URL: "http://" + addr + "/"}, &net.Dialer{})
	if got := classifyProbe(err); got != Refused {
		t.Errorf("class = %v (%v), want refused", got, err)
	}
}

func TestClassifyProbe(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Class
	}{
		{"failure keeps class", &Failure{Class: AuthRejected, Stage: StageProxyAuth}, AuthRejected},
		{"wrapped failure", fmt.Errorf("dial: %w", &Failure{Class: SlowBody}), SlowBody},
		{"target timeout", &Failure{Class: TargetTimeout}, Timeout},
		{"target unreachable", &Failure{Class: TargetUnreachable}, UpstreamError},
		{"none", &Failure{}, UpstreamError},
		{"operator", &Failure{Class: Operator}, UpstreamError},
		{"econnrefused", &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, Refused},
		{"context deadline", context.DeadlineExceeded, Timeout},
		{"conn deadline", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), Timeout},
		{"net timeout", &net.DNSError{IsTimeout: true}, Timeout},
		{"eof", io.ErrUnexpectedEOF, UpstreamError},
		{"status", &StatusError{StatusCode: 502}, UpstreamError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classifyProbe(tt.err); got != tt.want {
				t.Errorf("classifyProbe(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// TestProbeErrorHidesEchoedLine: an answer net/http cannot parse is not
// quoted into the probe's error (the record's detail, the log): an
// upstream that echoes the request would show its Proxy-Authorization.
func TestProbeErrorHidesEchoedLine(t *testing.T) {
	addr := rawServer(t, func(c net.Conn) {
		c.Read(make([]byte, 512))
		io.WriteString(c, "Proxy-Authorization: Basic Ym9iOkh0VHBQdw==\r\n\r\n")
	})
	err := runProbeSpec(t, ProbeConfig{URL: "http://" + addr + "/"}, &net.Dialer{})
	if err == nil {
		t.Fatal("probe passed")
	}
	if strings.Contains(err.Error(), "Ym9i") || strings.Contains(err.Error(), "Basic") {
		t.Errorf("probe error quotes the answer: %v", err)
	}
	if got := classifyProbe(err); got != UpstreamError {
		t.Errorf("class %v, want upstream_error", got)
	}
}
