package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// ErrNoEligible is returned when no endpoint became eligible within
// pool.wait_for_upstream.
var ErrNoEligible = errors.New("no eligible upstream")

// Request describes what one client connection asks the pool for.
type Request struct {
	// Addr is the target host:port, passed to the upstream unresolved.
	Addr string
	// Tags restrict the pick to endpoints carrying all of them.
	Tags []string
	// Session is a sticky-session id ("" for none).
	Session string
}

// Host returns the target host without port.
func (r Request) Host() string {
	h, _, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return r.Addr
	}
	return strings.ToLower(h)
}

// Attempt records one try of one endpoint.
type Attempt struct {
	Upstream string
	Failure  *health.Failure
}

// AttemptsError is returned when every attempt failed. It unwraps to the
// last failure so errors.As finds its class and stage.
type AttemptsError struct {
	Attempts []Attempt
	// Waited is set when the pool also waited for an eligible upstream
	// and none came before the wait expired.
	Waited bool
}

func (e *AttemptsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "all %d attempts failed", len(e.Attempts))
	for _, a := range e.Attempts {
		fmt.Fprintf(&b, "; upstream %s: %v", a.Upstream, a.Failure)
	}
	return b.String()
}

func (e *AttemptsError) Unwrap() error {
	if len(e.Attempts) == 0 {
		return nil
	}
	return e.Attempts[len(e.Attempts)-1].Failure
}

// Last returns the last attempt (zero Attempt when none).
func (e *AttemptsError) Last() Attempt {
	if len(e.Attempts) == 0 {
		return Attempt{}
	}
	return e.Attempts[len(e.Attempts)-1]
}

// Lease is an established connection through one endpoint. The caller owns
// Conn and must call Done exactly once when the tunnel ends.
type Lease struct {
	Conn     net.Conn
	Endpoint *Endpoint
	Attempts []Attempt // failed attempts before this one
	// Setup is the time from the start of Dial to the established tunnel.
	Setup time.Duration

	pool  *Pool
	epoch uint64 // health epoch when leased: stale outcomes only count
	done  bool
}

// Fail reports a failure observed after the tunnel was established
// (slow body, target HTTP error). It may be called before Done.
func (l *Lease) Fail(f *health.Failure) {
	l.pool.tr.FailEpoch(l.Endpoint.rec, l.epoch, f)
}

// Done releases the lease. It does not close Conn.
func (l *Lease) Done() {
	if l.done {
		return
	}
	l.done = true
	l.Endpoint.active.Add(-1)
}

// Dial establishes a connection to req.Addr through an eligible endpoint.
// ctx governs establishing the connection only (waiting, dial, proxy
// handshake), never the returned conn's lifetime.
//
// A failure before the client has been answered is retried transparently
// on another endpoint, up to pool.max_attempts distinct endpoints. Target
// failures reported by a healthy upstream (target unreachable or timed out)
// are returned at once: another upstream would meet the same target. When
// no endpoint is eligible and none has been tried, Dial waits up to
// pool.wait_for_upstream, woken by the tracker as soon as one becomes
// eligible, then returns ErrNoEligible.
func (p *Pool) Dial(ctx context.Context, req Request) (*Lease, error) {
	start := p.clock.Now()
	a := p.NewAttempts(req)
	for {
		e, err := a.Next(ctx)
		if err != nil {
			return nil, err
		}
		conn, err := e.dialer.DialContext(ctx, "tcp", req.Addr)
		if err == nil {
			a.Succeeded(e)
			return &Lease{Conn: conn, Endpoint: e, Attempts: a.list, Setup: p.clock.Now().Sub(start), pool: p, epoch: p.tr.Epoch(e.rec)}, nil
		}
		if stop := a.Failed(ctx, e, err); stop != nil {
			return nil, stop
		}
	}
}

// Attempts is the attempt loop for one client request, for callers that
// do their own I/O per endpoint (plain-HTTP forwarding). Not safe for
// concurrent use.
type Attempts struct {
	p         *Pool
	req       Request
	host      string
	list      []Attempt
	tried     []*Endpoint
	waitTimer <-chan time.Time
}

// NewAttempts starts an attempt loop for req.
func (p *Pool) NewAttempts(req Request) *Attempts {
	return &Attempts{p: p, req: req, host: req.Host(), tried: make([]*Endpoint, 0, p.cfg.MaxAttempts)}
}

// List returns the failed attempts so far.
func (a *Attempts) List() []Attempt { return a.list }

// Next returns the next endpoint to try, counted as active (release it with
// Release or through a Lease). Every endpoint it returns counts as one of
// pool.max_attempts, whether it then fails or is retried for its answer. It waits for an eligible endpoint when none
// has been tried yet; it returns ErrNoEligible when the wait expires, an
// *AttemptsError when attempts ran out or no untried endpoint is left.
func (a *Attempts) Next(ctx context.Context) (*Endpoint, error) {
	p := a.p
	for len(a.tried) < p.cfg.MaxAttempts {
		changed := p.tr.Changed()
		if e := p.pick(a.req, a.host, a.tried); e != nil {
			a.tried = append(a.tried, e)
			return e, nil
		}
		if len(a.tried) > 0 {
			break
		}
		if a.waitTimer == nil {
			a.waitTimer = p.clock.After(p.cfg.WaitForUpstream)
		}
		if err := p.wait(ctx, changed, a.waitTimer); err != nil {
			return nil, err
		}
	}
	return nil, &AttemptsError{Attempts: a.list}
}

// Succeeded reports a successful attempt on e (which stays active).
func (a *Attempts) Succeeded(e *Endpoint) {
	a.p.tr.SuccessTarget(e.rec, a.host)
	a.p.sessions.bind(a.req.Session, e)
}

// Failed reports a failed attempt on e and releases it. It returns nil when
// the loop may go on, or the error to give the client: the client's own
// cancellation, or an *AttemptsError after a target failure.
func (a *Attempts) Failed(ctx context.Context, e *Endpoint, err error) error {
	p := a.p
	e.active.Add(-1)
	if ctx.Err() != nil && IsCanceled(err) {
		// The client went away: neither a success nor a failure.
		p.tr.Neutral(e.rec)
		return ctx.Err()
	}
	f := Classify(err, health.StageDial)
	if f.Target == "" {
		f.Target = a.host
	}
	p.tr.Fail(e.rec, f)
	a.list = append(a.list, Attempt{Upstream: e.Name, Failure: f})
	if f.Class.IsTargetFailure() {
		return &AttemptsError{Attempts: a.list}
	}
	return nil
}

// Release ends e's use by a request that Next returned it for.
func (p *Pool) Release(e *Endpoint) { e.active.Add(-1) }

// Report records a failure observed on e after the client was answered.
func (p *Pool) Report(e *Endpoint, f *health.Failure) { p.tr.Fail(e.rec, f) }

// DialContext dials addr through e with the endpoint's own dialer. It does
// not report to health; the pool's attempt loop does.
func (e *Endpoint) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return e.dialer.DialContext(ctx, network, addr)
}

// pick selects an untried endpoint that may take a new tunnel now, and
// counts the tunnel as active on it.
func (p *Pool) pick(req Request, host string, tried []*Endpoint) *Endpoint {
	cands := p.Endpoints()
	ok := func(e *Endpoint) bool {
		for _, t := range tried {
			if t == e {
				return false
			}
		}
		if len(req.Tags) > 0 && !e.HasTags(req.Tags) {
			return false
		}
		if e.MaxConns > 0 && e.active.Load() >= int64(e.MaxConns) {
			return false
		}
		if !p.tr.AdmitTarget(e.rec, host) {
			return false
		}
		if e.limit != nil && !e.limit.take() {
			return false
		}
		if n := e.active.Add(1); e.MaxConns > 0 && n > int64(e.MaxConns) {
			e.active.Add(-1)
			return false
		}
		return true
	}
	if s := p.sessions.lookup(req.Session); s != nil && ok(s) {
		return s
	}
	return p.strategy.Pick(cands, ok)
}

// wait blocks until the tracker signals a change, the wait expires or ctx
// ends. It counts the client as waiting meanwhile.
func (p *Pool) wait(ctx context.Context, changed <-chan struct{}, expired <-chan time.Time) error {
	p.waiting.Add(1)
	defer p.waiting.Add(-1)
	select {
	case <-changed:
		return nil
	case <-expired:
		return ErrNoEligible
	case <-ctx.Done():
		return ctx.Err()
	}
}
