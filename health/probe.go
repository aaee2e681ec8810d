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
	"sync"
	"syscall"
	"time"
)

// Probe read bounds: a probe reads at most this much of the status line
// and headers, and of the body (STYLE 28).
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
	// seenKey is addr as tunnels file it (lower case), for asking the
	// target table whether client traffic reached it.
	seenKey string
	// target is what the probes tell of the probe target itself. The
	// spec is immutable; target is the one mutable part, and a reload
	// (a new spec) starts it afresh.
	target *probeTarget
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
	p.seenKey = strings.ToLower(p.addr)
	p.target = &probeTarget{}
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
// checked and body read to its end (at most maxProbeBody of it, and
// checked when ExpectBody is set), all within the probe timeout. A TCP
// connect alone never passes: an upstream that accepts and then closes or
// speaks garbage fails at the status line.
//
// setup is the probe's set-up time on clock: from its start until d's dial
// returned a connection (dial and proxy handshake, as a tunnel's set-up
// time is measured), 0 when the dial failed.
func (p *probeSpec) run(ctx context.Context, d Dialer, clock Clock) (setup time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	start := clock.Now()
	var raw net.Conn
	proxyAuth, forward := "", false
	if fd, ok := d.(ForwardDialer); ok && !p.tls {
		raw, proxyAuth, forward, err = fd.DialForward(ctx)
	}
	if !forward && err == nil {
		raw, err = d.DialContext(ctx, "tcp", p.addr)
	}
	if err != nil {
		return 0, err
	}
	setup = max(clock.Now().Sub(start), 1)
	return setup, p.exchange(ctx, d, raw, proxyAuth, forward)
}

// exchange is run's part once raw, the connection through the upstream,
// is up: TLS, the GET and the checks of its answer. d is the dialer
// that made raw, for scrubbing what the peer sent.
func (p *probeSpec) exchange(ctx context.Context, d Dialer, raw net.Conn, proxyAuth string, forward bool) error {
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
			return silentAt(fmt.Errorf("probe tls: %w", scrubPeerErr(d, err))) // names from the target's certificate
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
	dr := &deadlineReader{r: conn}
	lr := &io.LimitedReader{R: dr, N: maxProbeHeader}
	resp, err := http.ReadResponse(bufio.NewReader(lr), &http.Request{Method: http.MethodGet})
	if err != nil {
		if lr.N <= 0 {
			return fmt.Errorf("probe response: header exceeds %d bytes", maxProbeHeader)
		}
		if dr.err != nil {
			// The deadline cut a line short: net/http parses the part it
			// got ("HTTP/1.1 2": malformed status code) and reports that,
			// not the timeout. The peer went silent; it did not send
			// garbage.
			return silentAt(fmt.Errorf("probe response: %w", dr.err))
		}
		if msg := err.Error(); strings.Contains(msg, `"`) {
			// net/http quotes the line it could not parse: an upstream
			// that echoes the request would put its Proxy-Authorization
			// into the record's detail and the log.
			msg, _, _ = strings.Cut(msg, `"`)
			return fmt.Errorf("probe response: %s(the line is not shown: it may echo the request)", msg)
		}
		// A header line it could not parse, or the target's silence.
		return silentAt(fmt.Errorf("probe response: %w", scrubPeerErr(d, err)))
	}
	defer resp.Body.Close()
	if forward && proxyRejectedAuth(resp) {
		return &Failure{Class: AuthRejected, Stage: StageProxyAuth, Err: &StatusError{StatusCode: resp.StatusCode}}
	}
	if forward {
		if f := proxyTargetFailure(resp); f != nil {
			return f
		}
	}
	if !slices.Contains(p.expect, resp.StatusCode) {
		return &StatusError{StatusCode: resp.StatusCode}
	}
	lr.N += maxProbeBody
	var body bytes.Buffer
	var w io.Writer = io.Discard
	if len(p.body) > 0 {
		w = &body
	}
	// The body is read to its end, or to maxProbeBody (what lies beyond
	// is not read and fails nothing): bug, a 200 whose body stopped short
	// or stalled passed, and traffic through the upstream then failed at
	// body. The body's end is checked first, so expected text in a body
	// cut short still fails.
	if n, err := io.Copy(w, io.LimitReader(resp.Body, maxProbeBody)); err != nil {
		return bodyFailed(d, resp.ContentLength, n, err)
	}
	if len(p.body) > 0 && !bytes.Contains(body.Bytes(), p.body) {
		return errors.New("probe body: expected text not found")
	}
	return nil
}

// bodyFailed is the probe's error for a body read that ended in err after
// n bytes of the length declared (-1: none): a timeout is the target's
// silence (silentAt), anything else (an early close, a broken chunk) a
// bodyError.
func bodyFailed(d Dialer, declared, n int64, err error) error {
	if isTimeout(err) {
		return silentAt(fmt.Errorf("probe body: %w", err))
	}
	of := ""
	if declared >= 0 {
		of = " of " + strconv.FormatInt(declared, 10)
	}
	return &bodyError{err: fmt.Errorf("probe body: cut short after %d%s bytes: %w", n, of, scrubPeerErr(d, err))}
}

// bodyError is a probe whose answer had a good status and headers and a
// body that ended before its end (unexpected EOF, a broken chunk). Through
// a tunnel or a forwarding proxy the body is the target's as much as the
// proxy's, so it has a target sign (signBadBody) like a wrong status: a
// target that cuts its bodies short does not escalate every upstream. It
// classifies as upstream_error.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// deadlineReader remembers the latest timeout its reader returned, for
// telling a line the deadline cut short from one the peer sent malformed.
type deadlineReader struct {
	r   io.Reader
	err error
}

func (dr *deadlineReader) Read(b []byte) (int, error) {
	n, err := dr.r.Read(b)
	if err != nil && isTimeout(err) {
		dr.err = err
	}
	return n, err
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

// proxyTargetFailure is the target failure an HTTP proxy's own answer to
// a forwarded probe reports (UPSTREAM-SIGNALS.md): squid's ERR_CONNECT_FAIL,
// ERR_DNS_FAIL, ERR_READ_TIMEOUT; tinyproxy's "500 Unable to connect".
// nil for any other answer. So a dead probe target is seen as one through
// squid and tinyproxy too (probeTarget): it was "probe status 503", an
// upstream_error, and every such upstream's cooldown grew to its max.
func proxyTargetFailure(resp *http.Response) *Failure {
	squid, _, _ := strings.Cut(resp.Header.Get("X-Squid-Error"), " ")
	class := TargetUnreachable
	switch {
	case resp.StatusCode < 500:
		return nil
	case squid == "ERR_CONNECT_FAIL", squid == "ERR_DNS_FAIL":
	case squid == "ERR_READ_TIMEOUT":
		class = TargetTimeout
	case squid == "" && resp.StatusCode == 500 && strings.HasPrefix(resp.Status, "500 Unable to connect") &&
		strings.HasPrefix(strings.ToLower(resp.Header.Get("Server")), "tinyproxy"):
	default:
		return nil
	}
	what := squid
	if what == "" {
		what = "Unable to connect"
	}
	return &Failure{Class: class, Stage: StageTargetConnect,
		Err: fmt.Errorf("probe status %d: the proxy could not reach the probe target (%s)", resp.StatusCode, what)}
}

// SetupObserver is implemented by a Dialer that takes the set-up time of
// each passing probe through it (Endpoint's in package upstream: it feeds
// the smoothed latency lowest-latency picks by, as a tunnel's set-up does,
// so that the strategy has figures before any traffic). ObserveSetup is
// called outside every lock once the probe's result is applied.
type SetupObserver interface {
	ObserveSetup(d time.Duration)
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

// probeTarget tells whether the probe target itself seems down. Issue:
// with probe.url's target down, every probe failed at the target
// (target_connect: target_unreachable, as the upstream reported it) and
// counted as the upstream's, so each upstream's cooldown grew towards max
// and permanent_after disabled it, although nothing said the upstreams
// were at fault. classifyProbe's premise, that other upstreams reach the
// probe target, is checked here.
//
// The target is taken for down when probes through two upstreams in a row
// failed at the target with nothing reaching it in between (no passing
// probe, no client tunnel to its host:port), or were both answered the
// same unexpected status, or both timed out waiting for the target's
// answer, or both had the body of its answer cut short, with no passing
// probe in between: one upstream alone failing
// there may be a proxy that reaches no target at all (or answers 5xx
// itself), and stays its own fault. While the target is down, failures at
// it cool at the base cooldown and count towards no permanent_after (see
// runProbe); the first passing probe ends it.
//
// A probe that passed through a third upstream is evidence against: bug,
// two proxies with broken egress (REP 4 and 5 to every CONNECT) took the
// target for down while the good upstreams passed their probes to it in
// the same second, so the broken ones were held at the base cooldown for
// ever and the 503 text of an empty pool blamed the target. A pass within
// probePassRecent of the earlier failure is taken as it is; an older one,
// through an upstream still eligible, is checked again by probing the
// target through that upstream (runProbe): if that passes, the target
// answers and the failing upstreams escalate as their own failures; if it
// fails there too, the target is taken for down. Probe results are far
// rarer than tunnels, so a mutex is enough.
type probeTarget struct {
	mu sync.Mutex
	// mu guards the fields below.
	// failed holds the latest probes that failed at the target since the
	// last passing one, through distinct records, the latest first.
	failed [2]probeFail
	// passed holds the latest passing probes, through distinct records,
	// the latest first.
	passed [2]probePass
	down   bool
	// checked is when toCheck last asked for a check (zero: never).
	checked time.Time
}

// probeFail is a probe that failed at the probe target: through rec, at,
// with sign (targetSign).
type probeFail struct {
	rec  *Record
	at   time.Time
	sign int
}

// probePass is a probe that passed through rec at at.
type probePass struct {
	rec *Record
	at  time.Time
}

// Signs of targetSign other than an HTTP status the target answered.
const (
	// signUnreachable is a failure the upstream reported as the target's
	// (unreachable, timed out).
	signUnreachable = -1
	// signSilent is a probe that timed out waiting for the target's
	// answer once the tunnel through the upstream was up (silentError).
	signSilent = -2
	// signBadBody is a probe answered with a body cut short (bodyError).
	signBadBody = -3
)

// probePassRecent is how close before the earlier of two failures at the
// target a probe passing through a third upstream must be to be taken as
// evidence that the target answers, without checking it again: probes
// that came due together (a start, a reload) run within it.
const probePassRecent = time.Minute

// probeCheckSpacing spaces the checks (toCheck) while the target is taken
// for down: each failure at the target would otherwise probe it once more
// through the upstream that passed last.
const probeCheckSpacing = time.Minute

// targetSign tells whether a probe error err came from the probe target
// rather than from the upstream as far as one probe can tell, and its
// sign: signUnreachable for a target failure the upstream reported
// (failedAtTarget), signSilent for a timeout waiting for the target's
// answer through the tunnel (bug: a probe target answering after 3 s with
// probe.timeout 2 s cooled every upstream with timeout cooldowns counted
// towards permanent_after, and disabled them all), the status for an
// answer not in expect_status (bug: a probe target answering 503 to every
// request cooled every upstream with growing cooldowns), signBadBody for
// a body cut short (bodyError). Probes through
// two upstreams meeting the same sign take the target for down. A proxy's
// own refusal (407 and the like, a *Failure) has no sign.
func targetSign(err error) (int, bool) {
	var se *silentError
	if errors.As(err, &se) {
		return signSilent, true
	}
	var be *bodyError
	if errors.As(err, &be) {
		return signBadBody, true
	}
	var f *Failure
	if errors.As(err, &f) {
		return signUnreachable, f.Class.IsTargetFailure()
	}
	var st *StatusError
	if errors.As(err, &st) {
		return st.StatusCode, true
	}
	return 0, false
}

// silentError is a probe that timed out at the target: the connection
// through the upstream was up (the proxy's handshake done, or its
// connection taken for a forwarded GET) and the target's TLS handshake,
// status line or body did not come within probe.timeout. It unwraps to
// the timeout, which classifies as such.
type silentError struct{ err error }

func (e *silentError) Error() string { return e.err.Error() }
func (e *silentError) Unwrap() error { return e.err }

// silentAt returns err, a failure of the exchange with the target, as a
// silentError when it is a timeout; any other error as it is.
func silentAt(err error) error {
	if isTimeout(err) {
		return &silentError{err: err}
	}
	return err
}

// isTimeout reports whether err is a deadline's: the conn's, the
// context's, or a net.Error timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &ne) && ne.Timeout()
}

// probeTargetKeep bounds how long a probe's failure at the target stands
// for the target's state under policy p: twice the longest base cooldown
// of the classes such a failure cools with, and at least 10 minutes, so
// records held at the base cooldown are probed again well within it; a
// failure older than that (the other upstream since removed or disabled)
// no longer says the target is down.
func probeTargetKeep(p Policy) time.Duration {
	return max(10*time.Minute, 2*max(p.For(Timeout).Base, p.For(UpstreamError).Base))
}

// probeCheck is the target checked again through rec, whose probe
// passed before (toCheck): err is that probe's outcome.
type probeCheck struct {
	rec *Record
	err error
}

// targetVerdict is what weigh makes of a probe.
type targetVerdict struct {
	// down: the probe target is taken for down for this probe.
	down bool
	// changed: down changed, for the caller to log after every lock.
	changed bool
	// upBy is the record whose passing probe says the target answers,
	// when that ended a down; nil when client traffic to the target's
	// host:port did (or nothing ended).
	upBy *Record
}

// judge tells, for a probe through r that failed at the target with sign
// at now, the earlier failure through another record it pairs with
// (same; rec nil when none within keep: r's own fault as far as anyone
// can tell), and the latest pass through a third record (pass; rec nil
// when none). It changes nothing. Caller holds pt.mu.
func (pt *probeTarget) judge(r *Record, sign int, now time.Time, keep time.Duration) (same, other probeFail, pass probePass) {
	for _, f := range pt.failed {
		if f.rec == nil || f.rec == r {
			continue
		}
		if other.rec == nil {
			other = f
		}
		if same.rec == nil && f.sign == sign {
			same = f
		}
	}
	if same.rec != nil && now.Sub(same.at) >= keep {
		same = probeFail{}
	}
	for _, p := range pt.passed {
		if p.rec != nil && p.rec != r && p.rec != same.rec {
			pass = p
			break
		}
	}
	return same, other, pass
}

// recentPass reports whether pass, through a third record, is evidence
// enough that the target answers for a failure pairing with same.
func recentPass(same probeFail, pass probePass) bool {
	return pass.rec != nil && !pass.at.Before(same.at.Add(-probePassRecent))
}

// toCheck returns the record whose earlier passing probe should be
// repeated before a failure err through r at now takes the target for
// down: there is such a pass, not recent enough to stand for itself, and
// no check ran within probeCheckSpacing while the target is taken for
// down. nil when no check is wanted. The caller checks only a record that
// is still eligible.
func (pt *probeTarget) toCheck(r *Record, err error, now time.Time, keep time.Duration) *Record {
	sign, atTarget := targetSign(err)
	if err == nil || !atTarget {
		return nil
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()
	same, _, pass := pt.judge(r, sign, now, keep)
	if same.rec == nil || pass.rec == nil || recentPass(same, pass) ||
		pt.down && now.Sub(pt.checked) < probeCheckSpacing {
		return nil
	}
	pt.checked = now
	return pass.rec
}

// passedThrough records a passing probe through r at now: the target
// answers. Caller holds pt.mu.
func (pt *probeTarget) passedThrough(r *Record, now time.Time) {
	pt.failed = [2]probeFail{}
	pt.down = false
	next := [2]probePass{{rec: r, at: now}}
	for _, p := range pt.passed {
		if p.rec != nil && p.rec != r {
			next[1] = p
			break
		}
	}
	pt.passed = next
}

// weigh records the outcome err of a probe through r at now, and chk's
// when the target was checked again through another upstream (toCheck;
// nil when not), and returns the verdict. reached reports whether client
// traffic reached the target's host:port since a time. A probe that
// failed short of the target (dial, handshake, auth) tells nothing of it
// and changes nothing.
func (pt *probeTarget) weigh(r *Record, err error, chk *probeCheck, now time.Time, keep time.Duration, reached func(since time.Time) bool) targetVerdict {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	was := pt.down
	sign, atTarget := targetSign(err)
	switch {
	case err == nil:
		pt.passedThrough(r, now)
		return targetVerdict{changed: was, upBy: r}
	case !atTarget:
		return targetVerdict{}
	}
	same, other, pass := pt.judge(r, sign, now, keep)
	pt.failed = [2]probeFail{{rec: r, at: now, sign: sign}, other}
	if same.rec == nil {
		// Only r fails there so lately: its own fault as far as anyone
		// can tell. The target's state stands until evidence ends it.
		return targetVerdict{}
	}
	if recentPass(same, pass) {
		// A third upstream's probe passed lately: the target answers,
		// those two upstreams do not.
		pt.down = false
		return targetVerdict{changed: was, upBy: pass.rec}
	}
	if chk != nil && chk.err == nil {
		pt.passedThrough(chk.rec, now)
		return targetVerdict{changed: was, upBy: chk.rec}
	}
	// Client traffic that reached the target's host:port says it accepts
	// connections, not that it answers the probe's request well (or in
	// time): it weighs against a target the upstreams could not reach,
	// not against one that answered them all the same status or kept
	// them all waiting.
	pt.down = sign != signUnreachable || !reached(same.at)
	return targetVerdict{down: pt.down, changed: pt.down != was}
}

// failedAtTarget reports a probe error that the upstream reported as the
// target's (it reached the proxy, which could not reach the target).
func failedAtTarget(err error) bool {
	var f *Failure
	return errors.As(err, &f) && f.Class.IsTargetFailure()
}

// classifyProbe maps a probe error to the class the record cools with
// (the stage is always probe). A *Failure from the upstream's dialer keeps
// its class, except that target failures become upstream classes: the
// probe target is rotor's own and other upstreams reach it, so an upstream
// that cannot is at fault (target_timeout → timeout, target_unreachable →
// upstream_error); when none does, probeTarget takes it for down and the
// cooldown does not grow. Otherwise: ECONNREFUSED → refused; deadline exceeded
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
