package health

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// forwardDialer is an HTTP proxy's dialer: DialForward reaches the proxy,
// DialContext (CONNECT) is refused, as stock squid does for port 80.
type forwardDialer struct {
	proxy string
	auth  string
}

func (d forwardDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return nil, &Failure{Class: UpstreamError, Stage: StageProxyHandshake, Err: errors.New("CONNECT to port 80 denied")}
}

func (d forwardDialer) DialForward(ctx context.Context) (net.Conn, string, bool, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", d.proxy)
	return c, d.auth, true, err
}

func TestProbeHTTPURLThroughHTTPProxyUsesAbsoluteForm(t *testing.T) {
	var gotURI, gotAuth string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotURI, gotAuth = r.RequestURI, r.Header.Get("Proxy-Authorization")
		if gotAuth == "Basic dGlueQ==" { // tinyproxy answers a wrong password with 401
			w.Header().Set("Server", "tinyproxy/1.11.1")
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if gotAuth != "Basic dTpw" {
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(proxy.Close)
	addr := proxy.Listener.Addr().String()

	cfg := ProbeConfig{URL: "http://probe.example/generate_204", ExpectStatus: []int{204}}
	if err := runProbeSpec(t, cfg, forwardDialer{proxy: addr, auth: "Basic dTpw"}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if gotURI != "http://probe.example/generate_204" {
		t.Errorf("request-target %q, want absolute form", gotURI)
	}

	err := runProbeSpec(t, cfg, forwardDialer{proxy: addr, auth: "Basic d3Jvbmc="})
	var f *Failure
	if !errors.As(err, &f) || f.Class != AuthRejected || f.Stage != StageProxyAuth {
		t.Fatalf("wrong proxy password: %v, want auth_rejected at proxy_auth", err)
	}

	err = runProbeSpec(t, cfg, forwardDialer{proxy: addr, auth: "Basic dGlueQ=="})
	if !errors.As(err, &f) || f.Class != AuthRejected {
		t.Fatalf("tinyproxy's 401: %v, want auth_rejected", err)
	}

	// https probe URLs still tunnel (here: the CONNECT refusal is the answer).
	if err := runProbeSpec(t, ProbeConfig{URL: "https://probe.example/"}, forwardDialer{proxy: addr}); err == nil {
		t.Fatal("https probe did not use the CONNECT path")
	}
}

// TestProbeThroughHTTPProxyTargetDown: an HTTP proxy's own answer that it
// could not reach the probe target (squid's ERR_CONNECT_FAIL, ERR_DNS_FAIL,
// ERR_READ_TIMEOUT; tinyproxy's "500 Unable to connect") is a target
// failure, so a dead probe target is seen as one through those proxies
// too. Bug: "probe status 503" was an upstream_error and every squid and
// tinyproxy upstream's cooldown grew to its max. A target's own 503 (no
// X-Squid-Error) stays a wrong status.
func TestProbeThroughHTTPProxyTargetDown(t *testing.T) {
	for _, tc := range []struct {
		name, squid, server, reason string
		code                        int
		want                        Class // ClassNone: a plain wrong status
	}{
		{"squid connect fail", "ERR_CONNECT_FAIL 111", "squid/5.7", "", 503, TargetUnreachable},
		{"squid dns fail", "ERR_DNS_FAIL 0", "squid/5.7", "", 503, TargetUnreachable},
		{"squid read timeout", "ERR_READ_TIMEOUT 0", "squid/5.7", "", 504, TargetTimeout},
		{"tinyproxy", "", "tinyproxy/1.11.1", "Unable to connect", 500, TargetUnreachable},
		{"target's own 503", "", "", "", 503, ClassNone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() {
						defer c.Close()
						c.Read(make([]byte, 4096))
						reason := tc.reason
						if reason == "" {
							reason = http.StatusText(tc.code)
						}
						hdr := "HTTP/1.1 " + strconv.Itoa(tc.code) + " " + reason + "\r\nContent-Length: 0\r\nConnection: close\r\n"
						if tc.squid != "" {
							hdr += "X-Squid-Error: " + tc.squid + "\r\n"
						}
						if tc.server != "" {
							hdr += "Server: " + tc.server + "\r\n"
						}
						io.WriteString(c, hdr+"\r\n")
					}()
				}
			}()
			t.Cleanup(func() { ln.Close() })
			err = runProbeSpec(t, ProbeConfig{URL: "http://probe.example/"}, forwardDialer{proxy: ln.Addr().String()})
			var f *Failure
			switch {
			case tc.want == ClassNone:
				var se *StatusError
				if !errors.As(err, &se) || failedAtTarget(err) {
					t.Errorf("%v: want a plain wrong status", err)
				}
			case !errors.As(err, &f) || f.Class != tc.want || !failedAtTarget(err):
				t.Errorf("%v: want a %v at the target", err, tc.want)
			}
		})
	}
}
