package health

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rs/zerolog"
)

// pipeUpstream is an in-process fake upstream: DialContext returns one end
// of a net.Pipe and serves one HTTP exchange on the other, so it works in
// synctest bubbles. Its behaviour is set with the fields below.
type pipeUpstream struct {
	status atomic.Int32 // answer status; 0 means 200
	mode   atomic.Int32 // pipeOK, pipeRefuse, pipeClose, pipeGarbage
	delay  time.Duration

	requests atomic.Int64 // HTTP requests seen (probes that reached the "target")
	inflight atomic.Int64 // open probe conns now
	maxIn    atomic.Int64 // max of inflight
	global   *inflightCounter
	onDial   func()
	// onRequest, when set, sees each request that reached the "target".
	onRequest func(*http.Request)

	wg sync.WaitGroup // server goroutines
}

const (
	pipeOK int32 = iota
	pipeRefuse
	pipeClose
	pipeGarbage
)

type inflightCounter struct {
	n, max atomic.Int64
}

func (c *inflightCounter) inc() {
	n := c.n.Add(1)
	for {
		m := c.max.Load()
		if n <= m || c.max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (p *pipeUpstream) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.onDial != nil {
		p.onDial()
	}
	if p.mode.Load() == pipeRefuse {
		return nil, &Failure{Class: Refused, Stage: StageDial, Err: io.EOF}
	}
	n := p.inflight.Add(1)
	for m := p.maxIn.Load(); n > m && !p.maxIn.CompareAndSwap(m, n); m = p.maxIn.Load() {
	}
	if p.global != nil {
		p.global.inc()
	}
	c1, c2 := net.Pipe()
	p.wg.Add(1)
	go func() { // owned by the test: exits when the exchange ends or c1 closes
		defer p.wg.Done()
		defer c2.Close()
		p.serve(c2)
	}()
	return &countedConn{Conn: c1, done: func() {
		p.inflight.Add(-1)
		if p.global != nil {
			p.global.n.Add(-1)
		}
	}}, nil
}

func (p *pipeUpstream) serve(c net.Conn) {
	switch p.mode.Load() {
	case pipeClose:
		return
	case pipeGarbage:
		io.WriteString(c, "\x05\x00garbage that is not http\r\n\r\n")
		return
	}
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	if p.onRequest != nil {
		p.onRequest(req)
	}
	p.requests.Add(1)
	if p.delay > 0 {
		time.Sleep(p.delay)
	}
	st := int(p.status.Load())
	if st == 0 {
		st = 200
	}
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", st, http.StatusText(st))
}

type countedConn struct {
	net.Conn
	once sync.Once
	done func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.done)
	return c.Conn.Close()
}

// funcDialer adapts a function to Dialer.
type funcDialer func(ctx context.Context, network, addr string) (net.Conn, error)

func (f funcDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

// newFakeTracker returns a tracker on a fake clock with no jitter.
func newFakeTracker(t *testing.T, cfg Config) (*Tracker, *healthtest.Clock) {
	t.Helper()
	clk := healthtest.NewClock(time.Time{})
	if cfg.Cooldown.Jitter == 0 {
		cfg.Cooldown.Jitter = -1
	}
	return NewTracker(cfg, clk, zerolog.Nop()), clk
}

// drive does synchronously what Run does, without its limits: it handles
// every item due now and runs each probe to completion.
func drive(t *testing.T, tr *Tracker) {
	t.Helper()
	for {
		due, _, _ := tr.sched.popDue(tr.clock.Now(), nil)
		if len(due) == 0 {
			return
		}
		for _, it := range due {
			switch it.kind {
			case kindProbe:
				s := tr.settings()
				q, ok := tr.dueProbe(s, it, tr.clock.Now())
				if !ok {
					continue
				}
				if d, ok := tr.claimProbe(q); ok {
					tr.runProbe(t.Context(), s.probe, q, d)
				}
			case kindRamp:
				if _, nx := tr.rampWake(it.rec, it); nx != nil {
					tr.sched.push(*nx)
				}
			}
		}
	}
}

// recordObserver collects observer events.
type recordObserver struct {
	mu     sync.Mutex
	trs    []Transition
	probes []bool
}

func (o *recordObserver) Transition(name string, tr Transition) {
	o.mu.Lock()
	o.trs = append(o.trs, tr)
	o.mu.Unlock()
}

func (o *recordObserver) Probe(name string, ok bool, d time.Duration) {
	o.mu.Lock()
	o.probes = append(o.probes, ok)
	o.mu.Unlock()
}
