package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// hopHeaders are removed in both directions (RFC 9110 section 7.6.1), plus
// the proxy credentials rotor consumes.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return false
}

// countingBody lets rotor know whether any byte of a large request body
// was consumed, so a request that never left can still be retried.
type countingBody struct {
	r io.Reader
	n atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *countingBody) Close() error { return nil }

// serveForward forwards one absolute-URI http:// request. Each request on a
// kept-alive client connection is a new pick from the pool; upstream
// connections are pooled per endpoint.
func (s *Server) serveForward(w http.ResponseWriter, r *http.Request, params userParams) {
	start := time.Now()
	id := s.connID.Add(1)
	cfg := s.cfg.Load()
	pcfg := s.pool.Config()
	addr := r.URL.Host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(strings.Trim(r.URL.Hostname(), "[]"), "80")
	}
	if s.selfTarget(addr) {
		plainError(w, http.StatusForbidden, "forbidden", errSelfTarget.Error())
		return
	}
	ctx := r.Context()

	// Make the body replayable when it is small enough to buffer.
	var buffered []byte
	var big *countingBody
	if r.Body != nil && r.Body != http.NoBody {
		if r.ContentLength >= 0 && r.ContentLength <= pcfg.RetryBodyLimit {
			// Buffering a small body is still receiving the request: bound
			// it like the headers, or a client that stalls its body holds
			// a goroutine and a connection for as long as it likes.
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Now().Add(cfg.Listen.HandshakeTimeout))
			b, err := io.ReadAll(io.LimitReader(r.Body, pcfg.RetryBodyLimit+1))
			if err != nil {
				plainError(w, http.StatusBadRequest, "bad_request", "reading request body: "+err.Error())
				return
			}
			_ = rc.SetReadDeadline(time.Time{}) // on error it stays: net/http drains the rest of the body after the 400
			buffered = b
		} else {
			big = &countingBody{r: r.Body}
		}
	}
	// Replayable requests take the lean path (forward_client.go); the
	// others go through net/http's Transport with a cleaned copy.
	var x *fwdExchange
	var out *http.Request
	if leanForwardable(r, big != nil) {
		x = &fwdExchange{r: r, addr: addr, body: buffered, firstByte: cfg.SlowBody.FirstByte, dialTO: pcfg.ConnectTimeout}
	} else {
		out = r.Clone(ctx) // deep-copies the header too
		out.RequestURI = ""
		removeHop(out.Header)
		out.Close = false
	}
	setBody := func() {
		switch {
		case buffered != nil:
			out.Body = io.NopCloser(bytes.NewReader(buffered))
			out.ContentLength = int64(len(buffered))
		case big != nil:
			out.Body = big
		default:
			out.Body = nil
		}
	}

	req := upstream.Request{Addr: addr, Tags: params.Tags, Session: params.Session}
	att := s.pool.NewAttempts(req)
	host := req.Host()
	// last is a response held back for retry_statuses: it is what the
	// client gets when no other upstream does better.
	var last *http.Response
	var lastEP *upstream.Endpoint
	fail := func(err error) {
		if last != nil {
			n, _ := s.writeResponse(w, last, lastEP, cfg.SlowBody.Stall)
			s.pool.Release(lastEP)
			s.logForward(id, r, params.User, lastEP, att, nil, n, start)
			return
		}
		cf := explain(err)
		plainError(w, cf.Status, cf.Header, cf.Reason)
		s.logForward(id, r, params.User, nil, att, err, 0, start)
	}
	for {
		e, err := att.Next(ctx)
		if err != nil {
			fail(err)
			return
		}
		var resp *http.Response
		if x != nil {
			resp, err = s.fwdClient(e).roundTrip(ctx, x)
		} else {
			setBody()
			resp, err = s.transport(e, cfg).RoundTrip(out)
		}
		if err != nil {
			err = classifyForwardErr(err, host)
		}
		if err == nil {
			if f := classifyProxyResponse(e, resp); f != nil {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
				resp.Body.Close()
				f.Target = host
				err = f
			}
		}
		if err != nil {
			sent := !beforeRequest(err)
			if stop := att.Failed(ctx, e, err); stop != nil {
				fail(stop)
				return
			}
			if (big != nil && big.n.Load() > 0) || (sent && !idempotent(r.Method)) {
				fail(&upstream.AttemptsError{Attempts: att.List()})
				return
			}
			continue
		}
		att.Succeeded(e)
		if slices.Contains(cfg.TargetHTTPError.Statuses, resp.StatusCode) {
			s.pool.Report(e, &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: host,
				Err: errors.New("target answered " + resp.Status)})
		}
		if last != nil {
			last.Body.Close()
			s.pool.Release(lastEP)
			last, lastEP = nil, nil
		}
		if slices.Contains(pcfg.RetryStatuses, resp.StatusCode) && idempotent(r.Method) && big == nil {
			// Try another upstream; keep this answer in case none does better.
			last, lastEP = resp, e
			continue
		}
		n, stalled := s.writeResponse(w, resp, e, cfg.SlowBody.Stall)
		if stalled {
			s.pool.Report(e, &health.Failure{Class: health.SlowBody, Stage: health.StageBody, Target: host,
				Err: errors.New("response body stalled for slow_body.stall")})
		}
		s.pool.Release(e)
		s.logForward(id, r, params.User, e, att, nil, n, start)
		return
	}
}

// classifyForwardErr classifies a RoundTrip error. Errors from rotor's own
// dialers already carry class and stage (dial, proxy handshake, auth,
// target connect). Anything else happened after the request was written:
// no response headers within slow_body.first_byte is slow_body at
// first_byte; the connection ending before any response is blamed on the
// target (a healthy proxy relays a target that hangs up as exactly that),
// so it does not cool the upstream on its own.
func classifyForwardErr(err error, host string) error {
	var f *health.Failure
	if errors.As(err, &f) {
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return &health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte, Target: host, Err: err}
	}
	if upstream.IsCanceled(err) {
		return err
	}
	return &health.Failure{Class: health.TargetUnreachable, Stage: health.StageFirstByte, Target: host, Err: err}
}

// beforeRequest reports whether err happened before any byte of the request
// could have reached the target (dial or proxy handshake), which makes any
// request safe to retry.
func beforeRequest(err error) bool {
	var f *health.Failure
	if !errors.As(err, &f) {
		return false
	}
	switch f.Stage {
	case health.StageDial, health.StageProxyHandshake, health.StageProxyAuth, health.StageTargetConnect:
		return true
	}
	return false
}

// writeResponse relays resp to the client, naming the upstream. A body
// that goes silent for stall is cut off and reported as slow.
func (s *Server) writeResponse(w http.ResponseWriter, resp *http.Response, e *upstream.Endpoint, stall time.Duration) (int64, bool) {
	defer resp.Body.Close()
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	removeHop(h)
	h.Set("X-Rotor-Upstream", e.Name)
	w.WriteHeader(resp.StatusCode)
	var stalled atomic.Bool
	var timer *time.Timer
	if stall > 0 {
		timer = time.AfterFunc(stall, func() { stalled.Store(true); resp.Body.Close() })
		defer timer.Stop()
	}
	flusher, _ := w.(http.Flusher)
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	var total int64
	for {
		n, err := resp.Body.Read(*bp)
		if timer != nil {
			timer.Reset(stall)
		}
		if n > 0 {
			if _, werr := w.Write((*bp)[:n]); werr != nil {
				return total, false
			}
			total += int64(n)
			// Flush when the upstream paused (a short read that is not the
			// end), so streamed responses reach the client as they come;
			// a body that arrives in one go is written once.
			if flusher != nil && err == nil && n < len(*bp) {
				flusher.Flush()
			}
		}
		if err != nil {
			return total, stalled.Load()
		}
	}
}

// transport returns the pooled HTTP transport of e. http:// upstreams get
// requests in absolute form (many proxies refuse CONNECT to port 80);
// the others carry them through a tunnel from e's dialer.
func (s *Server) transport(e *upstream.Endpoint, cfg *Config) http.RoundTripper {
	key := transportKey(e)
	if t, ok := s.transports.Load(key); ok {
		return t.(http.RoundTripper)
	}
	t := &http.Transport{
		Proxy:                 nil,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
		ResponseHeaderTimeout: cfg.SlowBody.FirstByte,
		DialContext:           e.DialContext,
	}
	if cfg.SlowBody.FirstByte < 0 {
		t.ResponseHeaderTimeout = 0
	}
	if e.Scheme() == "http" {
		proxyURL := *e.URL
		t.Proxy = http.ProxyURL(&proxyURL)
		timeout := s.pool.Config().ConnectTimeout
		t.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			c, err := d.DialContext(ctx, network, proxyURL.Host)
			if err != nil {
				return nil, upstream.Classify(err, health.StageDial)
			}
			return c, nil
		}
	}
	actual, _ := s.transports.LoadOrStore(key, t)
	return actual.(http.RoundTripper)
}

// fwdKey is the s.transports key of an endpoint's fwdClient.
type fwdKey struct{ u *url.URL }

// fwdClient returns the lean forward client of e (forward_client.go),
// kept next to its Transport and pruned with it. Shutdown closes its idle
// connections: they hold no goroutine, only a socket each.
func (s *Server) fwdClient(e *upstream.Endpoint) *fwdClient {
	key := fwdKey{transportKey(e)}
	if c, ok := s.transports.Load(key); ok {
		return c.(*fwdClient)
	}
	c := newFwdClient(e)
	actual, loaded := s.transports.LoadOrStore(key, c)
	if !loaded {
		context.AfterFunc(s.ctx, c.close)
	}
	return actual.(*fwdClient)
}

// transportKey identifies an endpoint's transport: its parsed URL, which a
// reload replaces (so a changed password gets a new transport and the old
// one is pruned). Comparing pointers keeps the per-request lookup free.
func transportKey(e *upstream.Endpoint) *url.URL { return e.URL }

// pruneTransports drops the transports and lean clients of endpoints no
// longer in the pool and closes their idle connections.
func (s *Server) pruneTransports() {
	live := map[*url.URL]bool{}
	for _, e := range s.pool.Endpoints() {
		live[transportKey(e)] = true
	}
	s.transports.Range(func(k, v any) bool {
		switch k := k.(type) {
		case *url.URL:
			if !live[k] {
				s.transports.Delete(k)
				v.(*http.Transport).CloseIdleConnections()
			}
		case fwdKey:
			if !live[k.u] {
				s.transports.Delete(k)
				v.(*fwdClient).close()
			}
		}
		return true
	})
}

// classifyProxyResponse recognises answers that come from an http upstream
// proxy itself rather than from the target (../shared/UPSTREAM-SIGNALS.md):
// 407 (and tinyproxy's 401) mean the proxy rejected rotor's credentials;
// squid marks its own errors with X-Squid-Error; tinyproxy answers an
// unreachable target with "500 Unable to connect". Responses from the target
// return nil.
func classifyProxyResponse(e *upstream.Endpoint, resp *http.Response) *health.Failure {
	if e.Scheme() != "http" {
		return nil
	}
	server := strings.ToLower(resp.Header.Get("Server"))
	squid := resp.Header.Get("X-Squid-Error")
	fail := func(c health.Class, st health.Stage) *health.Failure {
		return &health.Failure{Class: c, Stage: st, Err: &upstream.ConnectStatusError{StatusCode: resp.StatusCode, Status: resp.Status, SquidError: squid}}
	}
	switch {
	case resp.StatusCode == http.StatusProxyAuthRequired:
		return fail(health.AuthRejected, health.StageProxyAuth)
	case resp.StatusCode == http.StatusUnauthorized && strings.HasPrefix(server, "tinyproxy"):
		return fail(health.AuthRejected, health.StageProxyAuth)
	case squid != "":
		switch {
		case strings.HasPrefix(squid, "ERR_CONNECT_FAIL 110"), strings.HasPrefix(squid, "ERR_READ_TIMEOUT"):
			return fail(health.TargetTimeout, health.StageTargetConnect)
		case strings.HasPrefix(squid, "ERR_CONNECT_FAIL"), strings.HasPrefix(squid, "ERR_DNS_FAIL"), strings.HasPrefix(squid, "ERR_ZERO_SIZE_OBJECT"):
			return fail(health.TargetUnreachable, health.StageTargetConnect)
		case strings.HasPrefix(squid, "ERR_CACHE_ACCESS_DENIED"):
			return fail(health.AuthRejected, health.StageProxyAuth)
		default:
			return fail(health.UpstreamError, health.StageHTTPStatus)
		}
	case resp.StatusCode == http.StatusInternalServerError && strings.HasPrefix(server, "tinyproxy") && strings.Contains(resp.Status, "Unable to connect"):
		return fail(health.TargetUnreachable, health.StageTargetConnect)
	}
	return nil
}
