package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestHTTPSUpstreamAbsoluteForm: an https:// upstream got plain-HTTP
// requests and probes of http:// URLs through CONNECT host:80, which
// stock squid (CONNECT to SSL_ports only, on https_port too) denies with
// 403: every such upstream stayed cooling, and forwarding through it was
// denied. It now gets them in absolute form over TLS, as an http://
// upstream over TCP (credentials in Proxy-Authorization, the proxy's own
// answers classified alike), on the lean path and the Transport's.
func TestHTTPSUpstreamAbsoluteForm(t *testing.T) {
	srv, target, up := tlsUpstreamGateway(t, false)
	waitState(t, srv, "tls", health.Eligible) // the probe, of an http:// URL

	// The lean path (GET) and the Transport's (a POST with a body of
	// unknown length).
	resp, err := readAll(httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false))
	if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-Rotor-Upstream") != "tls" {
		t.Fatalf("GET through the https upstream: %v %v", statusOf(resp), err)
	}
	front, _ := url.Parse("http://" + srv.Addr("http"))
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(front), DisableKeepAlives: true}}
	t.Cleanup(c.CloseIdleConnections)
	req, _ := http.NewRequest(http.MethodPost, target.URL("/ok"), struct{ *strings.Reader }{strings.NewReader("body")})
	req.ContentLength = -1
	resp, err = readAll(c.Do(req))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST through the https upstream: %v %v", statusOf(resp), err)
	}
	if n := up.Tunnels(); n != 0 {
		t.Errorf("%d CONNECT tunnels for http:// targets, want none", n)
	}
	if n := up.Forwards(); n < 3 {
		t.Errorf("%d requests in absolute form, want the probe's and 2 more", n)
	}

	// The proxy's own 407 to a forwarded request is classified as an
	// http:// proxy's: auth_rejected for that host, not the CONNECT
	// rule that cools the whole upstream.
	up.SetMode(upstreamtest.Mode{Fault: upstreamtest.RejectAuth})
	resp, err = readAll(httpGet(t, srv.Addr("http"), "", "", target.URL("/ok"), false))
	if err != nil || resp.StatusCode == http.StatusOK {
		t.Fatalf("a 407 from the proxy was relayed as a success: %v %v", statusOf(resp), err)
	}
	if s := snapOf(t, srv, "tls"); s.State != health.Eligible {
		t.Errorf("a forwarded request's 407 cooled the https upstream whole: %v %v/%v", s.State, s.Reason, s.Stage)
	}
}

// TestForwardDialsThroughEndpoint: plain-HTTP forwarding to an http://
// upstream dialled e.URL.Host with a fresh net.Dialer, on the lean path
// and the Transport's, bypassing the endpoint's dialer and so the
// once-a-minute proxy name cache that tunnels and probes use (the cache
// itself: upstream TestEndpointDialForwardUsesNameCache). Both now dial
// through Endpoint.DialForward, seen here by the latency sample it takes.
func TestForwardDialsThroughEndpoint(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	for _, method := range []string{http.MethodGet, http.MethodPost} { // lean path, Transport
		t.Run(method, func(t *testing.T) {
			up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
			srv, _ := startGateway(t, fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"h\"\n", up.URL().String()))
			front, _ := url.Parse("http://" + srv.Addr("http"))
			c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(front), DisableKeepAlives: true}}
			t.Cleanup(c.CloseIdleConnections)
			req, _ := http.NewRequest(method, target.URL("/ok"), nil)
			if method == http.MethodPost {
				req.Body = io.NopCloser(strings.NewReader("body"))
				req.ContentLength = -1
			}
			resp, err := readAll(c.Do(req))
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("%s through the http upstream: %v %v", method, statusOf(resp), err)
			}
			if up.Forwards() != 1 || up.Tunnels() != 0 {
				t.Errorf("%d forwards, %d tunnels; want 1, 0", up.Forwards(), up.Tunnels())
			}
			if srv.Pool().Lookup("h").Latency() == 0 {
				t.Error("the forward connection was not dialled through the endpoint's dialer")
			}
		})
	}
}
