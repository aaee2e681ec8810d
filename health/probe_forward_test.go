package health

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
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
