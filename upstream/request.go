package upstream

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// Request describes what one client connection asks the pool for.
type Request struct {
	// Addr is the target host:port, passed to the upstream unresolved.
	Addr string
	// Tags restrict the pick to endpoints carrying all of them.
	Tags []string
	// Session is a sticky-session id ("" for none).
	Session string
	// User is the client's base user name ("" for none): sessions are
	// per user (see SessionID), so that one tenant reusing another's id
	// (1, job_1) neither pins nor moves the other's exit.
	User string
}

// SessionID returns the key the sticky session id of client user is kept
// under, here and in the fleet's store: user-session-id, the username
// form without tags, which stays readable and is unambiguous because the
// id holds no "-" (the username's separator); the id alone when user is
// empty, "" when id is.
func SessionID(user, id string) string {
	if id == "" || user == "" {
		return id
	}
	return user + "-session-" + id
}

// Host returns the target host without port, as per-target cooldowns and
// bans key it: lower case, without a name's final dot ("H.Example." is
// h.example, as /report stores it; the address sent upstream keeps the
// dot).
func (r Request) Host() string {
	h, _, err := net.SplitHostPort(r.Addr)
	if err != nil {
		return r.Addr
	}
	h = strings.ToLower(h)
	if len(h) > 1 && strings.IndexByte(h, ':') < 0 {
		h = strings.TrimSuffix(h, ".")
	}
	return h
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

// Error names each attempt's upstream and failure, after "all N attempts
// failed" when there were several ("all 1 attempts failed" read oddly,
// above all for a refusal no other upstream was asked about).
func (e *AttemptsError) Error() string {
	var b strings.Builder
	if len(e.Attempts) != 1 {
		fmt.Fprintf(&b, "all %d attempts failed", len(e.Attempts))
	}
	for _, a := range e.Attempts {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString("upstream " + a.Upstream + ": " + failureText(a.Failure))
	}
	return b.String()
}

// failureText is f's text without the class when it has none
// (health.ClassNone: the client's refusal, a cancellation, rotor's own
// machine): "none" is no class clients or operators know, and the
// client's 403 read "target_connect: none: dial tcp …".
func failureText(f *health.Failure) string {
	if f == nil || f.Class != health.ClassNone || f.Err == nil {
		return fmt.Sprint(f)
	}
	return f.Stage.String() + ": " + f.Err.Error()
}

// Unwrap returns the failure of the attempt Last returns.
func (e *AttemptsError) Unwrap() error {
	if len(e.Attempts) == 0 {
		return nil
	}
	return e.Attempts[e.answer()].Failure
}

// Last returns the attempt whose failure answers the client (zero Attempt
// when none): the last one, unless it failed on its upstream itself after
// an earlier attempt met a target failure, which is then the answer. A
// target failure is retried on another upstream when others reach the
// target (see Attempts.Failed); when that one fails on its own (its
// proxy refuses the connection, say), what the client learns of its
// target is still the target's error (target_unreachable, SOCKS5 reply 5;
// target_timeout, 504), as when no retry was made.
func (e *AttemptsError) Last() Attempt {
	if len(e.Attempts) == 0 {
		return Attempt{}
	}
	return e.Attempts[e.answer()]
}

// answer is the index of Last's attempt in a non-empty e.Attempts. A last
// failure of no class (the client's request, rotor's own machine) or of
// the target is the answer.
func (e *AttemptsError) answer() int {
	n := len(e.Attempts) - 1
	if f := e.Attempts[n].Failure; f == nil || f.Class == health.ClassNone || f.Class.IsTargetFailure() {
		return n
	}
	for i := n - 1; i >= 0; i-- {
		if f := e.Attempts[i].Failure; f != nil && f.Class.IsTargetFailure() {
			return i
		}
	}
	return n
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
	epoch uint64    // health epoch when leased: stale outcomes only count
	key   string    // the request's host:port (Attempts.key)
	att   *Attempts // the attempt loop: its Release ends the endpoint's use and the session's hold
	done  atomic.Bool
}

// Fail reports a failure observed after the tunnel was established
// (slow body, target HTTP error). It may be called before Done. A
// failure naming the tunnel's host is filed under its host:port, as the
// attempt loop files its own (see Attempts.Failed), so that it can count
// towards the target-failure rule.
func (l *Lease) Fail(f *health.Failure) {
	if h, _, err := net.SplitHostPort(l.key); err == nil && f != nil && f.Target == h {
		f.Target = l.key
	}
	l.pool.tr.FailEpoch(l.Endpoint.rec, l.epoch, f)
}

// Done releases the lease. It does not close Conn. Calls after the first
// are ignored, so the active count stays exact. The lease's session, in
// use while the tunnel was open, slides its TTL from now.
func (l *Lease) Done() {
	if !l.done.CompareAndSwap(false, true) {
		return
	}
	l.att.Release(l.Endpoint)
}

// Dial establishes a connection to req.Addr through an eligible endpoint.
// ctx governs establishing the connection only (waiting, dial, proxy
// handshake), never the returned conn's lifetime.
//
// A failure before the client has been answered is retried transparently
// on another endpoint, up to pool.max_attempts distinct endpoints. Target
// failures reported by an upstream (target unreachable or timed out) are
// returned at once, another upstream would meet the same target, unless
// another upstream reached that host:port lately: then this one is the
// one that cannot get there, and another is tried (see Attempts.Failed). When
// no endpoint is eligible and none has been tried, Dial waits up to
// pool.wait_for_upstream, woken by the tracker as soon as one becomes
// eligible (or by a slot freeing on a saturated endpoint), then returns an
// error that satisfies errors.Is(err, ErrNoEligible).
//
// The duration of each successful dial + proxy handshake feeds the
// endpoint's smoothed latency (see Endpoint.DialContext).
func (p *Pool) Dial(ctx context.Context, req Request) (*Lease, error) {
	start := p.clock.Now()
	a := p.NewAttempts(req)
	a.Replayable() // nothing is sent to the target before the tunnel is up
	for {
		e, err := a.Next(ctx)
		if err != nil {
			return nil, err
		}
		if p.beforeDial != nil && e.MaxConns > 0 {
			p.beforeDial(e)
		}
		conn, err := e.DialContext(ctx, "tcp", req.Addr)
		if err == nil {
			a.Succeeded(e)
			return &Lease{Conn: conn, Endpoint: e, Attempts: a.list, Setup: p.clock.Now().Sub(start), pool: p,
				epoch: p.tr.Epoch(e.rec), key: a.key, att: a}, nil
		}
		if stop := a.Failed(ctx, e, err); stop != nil {
			return nil, stop
		}
	}
}
