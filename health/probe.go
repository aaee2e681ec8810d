package health

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Probe read bounds: a probe reads at most this much of the status line
// and headers, and of the body when ExpectBody is set (STYLE 28).
const (
	maxProbeHeader = 16 << 10
	maxProbeBody   = 64 << 10
)

// probeSpec is a parsed ProbeConfig, ready to run.
type probeSpec struct {
	addr    string // host:port to ask the upstream for
	host    string // host without port, TLS ServerName
	reqHost string // Host header
	path    string // request-target
	tls     bool
	tlsConf *tls.Config
	expect  []int
	body    []byte
	timeout time.Duration
}

// newProbeSpec parses c (defaults filled). It returns nil, nil when no URL
// is configured.
func newProbeSpec(c ProbeConfig) (*probeSpec, error) {
	if c.URL == "" {
		return nil, nil
	}
	u, err := parseProbeURL(c.URL)
	if err != nil {
		return nil, err
	}
	p := &probeSpec{
		host:    u.Hostname(),
		reqHost: u.Host,
		path:    u.RequestURI(),
		tls:     u.Scheme == "https",
		expect:  slices.Clone(c.ExpectStatus),
		body:    []byte(c.ExpectBody),
		timeout: c.Timeout,
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if p.tls {
			port = "443"
		}
	}
	p.addr = net.JoinHostPort(p.host, port)
	if p.tls {
		if c.TLS != nil {
			p.tlsConf = c.TLS.Clone()
		} else {
			p.tlsConf = &tls.Config{}
		}
		if p.tlsConf.ServerName == "" {
			p.tlsConf.ServerName = p.host
		}
		p.tlsConf.NextProtos = []string{"http/1.1"}
	}
	return p, nil
}

// aLongTimeAgo is a past deadline that unblocks every pending conn I/O.
var aLongTimeAgo = time.Unix(1, 0)

// run performs one probe through d: a tunnel to the probe URL's host:port
// over the upstream, TLS when https (SNI = host), one HTTP/1.1 GET, status
// (and optionally body) checked, all within the probe timeout. A TCP
// connect alone never passes: an upstream that accepts and then closes or
// speaks garbage fails at the status line.
func (p *probeSpec) run(ctx context.Context, d Dialer) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	var raw net.Conn
	var err error
	proxyAuth, forward := "", false
	if fd, ok := d.(ForwardDialer); ok && !p.tls {
		raw, proxyAuth, forward, err = fd.DialForward(ctx)
	}
	if !forward && err == nil {
		raw, err = d.DialContext(ctx, "tcp", p.addr)
	}
	if err != nil {
		return err
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		raw.SetDeadline(dl)
	}
	// Cancellation (Run stopping) unblocks the I/O below through a past
	// deadline; the watcher is waited for before returning (STYLE 27).
	watched := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		raw.SetDeadline(aLongTimeAgo)
		close(watched)
	})
	defer func() {
		if !stop() {
			<-watched
		}
	}()

	conn := raw
	if p.tls {
		tc := tls.Client(raw, p.tlsConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			return fmt.Errorf("probe tls: %w", err)
		}
		conn = tc
	}
	target := p.path
	extra := ""
	if forward {
		target = "http://" + p.reqHost + p.path
		if proxyAuth != "" {
			extra = "Proxy-Authorization: " + proxyAuth + "\r\n"
		}
	}
	req := "GET " + target + " HTTP/1.1\r\nHost: " + p.reqHost +
		"\r\nUser-Agent: rotor-probe\r\nAccept: */*\r\nConnection: close\r\n" + extra + "\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return fmt.Errorf("probe write: %w", err)
	}
	lr := &io.LimitedReader{R: conn, N: maxProbeHeader}
	resp, err := http.ReadResponse(bufio.NewReader(lr), &http.Request{Method: http.MethodGet})
	if err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("probe response: header exceeds %d bytes", maxProbeHeader)
		}
		return fmt.Errorf("probe response: %w", err)
	}
	defer resp.Body.Close()
	if forward && proxyRejectedAuth(resp) {
		return &Failure{Class: AuthRejected, Stage: StageProxyAuth, Err: &StatusError{StatusCode: resp.StatusCode}}
	}
	if !slices.Contains(p.expect, resp.StatusCode) {
		return &StatusError{StatusCode: resp.StatusCode}
	}
	if len(p.body) == 0 {
		return nil
	}
	lr.N += maxProbeBody
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody))
	if bytes.Contains(body, p.body) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("probe body: %w", err)
	}
	return errors.New("probe body: expected text not found")
}

// proxyRejectedAuth recognises an HTTP proxy refusing rotor's credentials
// on a forwarded request: 407, or tinyproxy's 401 (it answers a wrong
// password with 401 and its own Server header, see UPSTREAM-SIGNALS.md).
func proxyRejectedAuth(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusProxyAuthRequired:
		return true
	case http.StatusUnauthorized:
		return strings.HasPrefix(strings.ToLower(resp.Header.Get("Server")), "tinyproxy")
	}
	return false
}

// ForwardDialer is implemented by dialers of HTTP proxies (http://, and
// https:// with TLS to the proxy). For an http:// probe URL the probe then
// sends its GET in absolute form to the proxy, the way rotor forwards
// plain-HTTP traffic, rather than through a CONNECT tunnel: stock squid
// and tinyproxy configurations refuse CONNECT to port 80, which would keep
// every such upstream out of the pool. ok is false when the dialer cannot
// forward (the probe then tunnels).
type ForwardDialer interface {
	DialForward(ctx context.Context) (c net.Conn, proxyAuth string, ok bool, err error)
}

// StatusError is a probe answered with a status not in expect_status.
type StatusError struct{ StatusCode int }

// Error returns "probe status N".
func (e *StatusError) Error() string { return "probe status " + strconv.Itoa(e.StatusCode) }

// classifyProbe maps a probe error to the class the record cools with
// (the stage is always probe). A *Failure from the upstream's dialer keeps
// its class, except that target failures become upstream classes: the
// probe target is rotor's own and other upstreams reach it, so an upstream
// that cannot is at fault (target_timeout → timeout, target_unreachable →
// upstream_error). Otherwise: ECONNREFUSED → refused; deadline exceeded
// (context or conn) or a net.Error timeout → timeout; anything else,
// including garbage, early close and a wrong status, → upstream_error.
func classifyProbe(err error) Class {
	var f *Failure
	if errors.As(err, &f) {
		switch {
		case f.Class == TargetTimeout:
			return Timeout
		case f.Class == TargetUnreachable, f.Class == ClassNone, f.Class == Operator, f.Class >= numClasses:
			return UpstreamError
		}
		return f.Class
	}
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return Refused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return Timeout
	}
	return UpstreamError
}
