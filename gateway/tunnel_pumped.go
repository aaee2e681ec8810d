package gateway

import (
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/internal/splice"
)

// pumpedTunnel is relay's behaviour (first-byte and stall detection,
// half-close linger, idle timeout, byte counts) for a tunnel between two
// raw TCP sockets, with each direction a splice.Pump: between bursts a
// direction holds no goroutine, no buffer and no pipe, so an idle tunnel
// costs its sockets and a few small records. Timing moves from read
// deadlines to timers and the watchdog, since a parked direction makes no
// read a deadline could end.
type pumpedTunnel struct {
	r          *splice.Reactor
	client, up *net.TCPConn
	pending    []byte
	slow       SlowBodyConfig
	idle       time.Duration
	report     func(*health.Failure)
	answered   func() // may be nil; the first byte from the upstream side came (relay's answered)
	end        func(relayResult)
	left       atomic.Int32 // directions still running

	mu       sync.Mutex // guards the fields below
	wd       *watchdog
	upP      *splice.Pump // client → upstream
	downP    *splice.Pump // upstream → client
	aborted  bool
	ended    bool        // both directions finished: the first-byte clock is off
	upDone   bool        // the upstream side finished sending (its FIN)
	sentAt   time.Time   // the client's first bytes went up (first-byte latency)
	gotFirst bool        // the upstream side has sent
	fbTimer  *time.Timer // first-byte clock, pushed back while the client sends (firstByteExpired)
	res      relayResult
}

// newPumpedTunnel returns nil when the tunnel cannot be pumped (no
// reactor, or a side is not a raw TCP socket, e.g. TLS to an https proxy):
// the caller relays it the classic way.
func newPumpedTunnel(r *splice.Reactor, client, up net.Conn, pending []byte, slow SlowBodyConfig, idle time.Duration,
	report func(*health.Failure), answered func(), end func(relayResult)) *pumpedTunnel {
	if r == nil {
		return nil
	}
	c, ok1 := client.(*net.TCPConn)
	u, ok2 := up.(*net.TCPConn)
	if !ok1 || !ok2 {
		return nil
	}
	return &pumpedTunnel{r: r, client: c, up: u, pending: pending, slow: slow, idle: idle, report: report, answered: answered, end: end}
}

// start begins both directions; the tunnel then runs on its own and calls
// end once both have finished.
func (t *pumpedTunnel) start() {
	t.left.Store(2)
	wd := startWatchdog(t.client, t.up, t.slow.Stall, t.idle, t.report, t.watchEnded)
	t.mu.Lock()
	t.wd = wd
	t.mu.Unlock()
	upP := t.r.Pump(t.up, t.client, t.pending, t.clientSent, t.clientDone)
	downP := t.r.Pump(t.client, t.up, nil, t.upstreamSent, t.upstreamDone)
	t.mu.Lock()
	t.upP, t.downP = upP, downP
	aborted := t.aborted
	t.mu.Unlock()
	if aborted {
		t.abort() // an abort before the pumps existed could not stop them
	}
}

// abort force-closes the tunnel (shutdown, idle timeout, first-byte
// timeout): close both sockets, then stop the parked directions.
func (t *pumpedTunnel) abort() {
	t.mu.Lock()
	t.aborted = true
	upP, downP := t.upP, t.downP
	t.mu.Unlock()
	_ = t.client.Close()
	_ = t.up.Close()
	if upP != nil {
		upP.Stop()
	}
	if downP != nil {
		downP.Stop()
	}
}

// clientSent starts the first-byte clock: the client sent, the upstream
// side must answer within slow_body.first_byte of the client's last byte
// sent upstream (firstByteExpired pushes the clock back while the client
// is still sending).
func (t *pumpedTunnel) clientSent() {
	if t.slow.FirstByte <= 0 {
		return
	}
	t.mu.Lock()
	if !t.gotFirst && t.sentAt.IsZero() && !t.aborted {
		t.sentAt = time.Now()
		t.fbTimer = time.AfterFunc(t.slow.FirstByte, t.firstByteExpired)
	}
	t.mu.Unlock()
}

// upstreamSent runs once, as the first bytes from the upstream side are
// written to the client.
func (t *pumpedTunnel) upstreamSent() {
	t.mu.Lock()
	t.gotFirst = true
	if !t.sentAt.IsZero() {
		t.res.FirstByte = time.Since(t.sentAt)
		t.fbTimer.Stop()
	}
	t.mu.Unlock()
	if t.answered != nil {
		t.answered() // outside mu: it reports to health
	}
}

// firstByteExpired runs first_byte after the clock was (re)armed. The
// pump calls clientSent once only, so the bursts of an upload do not each
// re-arm a timer (nothing is added to the copy): here the kernel says when
// the client's data last went up (watchdog.sinceSent), and while that is
// more recent than first_byte the client is still sending, or only just
// finished; the server legitimately waits for the end of the request, so
// the clock is re-armed to first_byte after that last byte. An upload
// costs one TCP_INFO read per first_byte. Without counters (the watchdog
// could not start) the clock counts from the first byte, as it must then.
func (t *pumpedTunnel) firstByteExpired() {
	t.mu.Lock()
	wd, live := t.wd, !t.gotFirst && !t.aborted && !t.ended
	t.mu.Unlock()
	if !live {
		return
	}
	if ago, ok := wd.sinceSent(); ok && ago < t.slow.FirstByte-firstByteSlack {
		t.mu.Lock()
		if !t.gotFirst && !t.aborted && !t.ended {
			t.fbTimer.Reset(t.slow.FirstByte - ago)
		}
		t.mu.Unlock()
		return
	}
	t.mu.Lock()
	expired := !t.gotFirst && !t.ended
	if expired {
		t.res.Failure = firstByteFailure()
	}
	t.mu.Unlock()
	if expired {
		t.abort() // the client asked and nothing is coming
	}
}

// firstByteSlack absorbs the kernel's stamp granularity (a jiffy, 1–10 ms,
// reported in whole ms): a last send that old short of first_byte counts
// as first_byte ago rather than re-arming the clock for a few ms.
const firstByteSlack = 10 * time.Millisecond

// clientDone: the client finished sending. At its FIN (err nil: it
// half-closed, or closed and left) the upstream side may go on answering;
// the watchdog bounds its silence (halfClosedSilence). Any other end (a
// reset) ends the tunnel at once (reset).
func (t *pumpedTunnel) clientDone(n int64, err error) {
	t.mu.Lock()
	t.res.Up = n
	wd := t.wd
	t.mu.Unlock()
	if abortive(err) {
		t.reset(resetSide(t.client, t.up, resetClient, resetUpstream))
	}
	if t.lastDirection() {
		return
	}
	t.halfClose(t.up)
	wd.halfClosed()
}

// upstreamDone: the upstream side finished sending; at its FIN the client
// may go on sending, within halfClosedSilence of silence; a reset ends the
// tunnel at once.
func (t *pumpedTunnel) upstreamDone(n int64, err error) {
	t.mu.Lock()
	t.res.Down = n
	t.upDone = err == nil && !t.aborted
	wd := t.wd
	t.mu.Unlock()
	if abortive(err) {
		t.reset(resetSide(t.up, t.client, resetUpstream, resetClient))
	}
	if t.lastDirection() {
		return
	}
	t.halfClose(t.client)
	wd.upstreamDone()
}

// reset ends the tunnel at once after side's connection ended otherwise
// than by a FIN: the peer reset it (ECONNRESET; a client that closes with
// SO_LINGER 0, or with unread data), or TCP gave up on it (keep-alive).
// Taken for a half-close, it would send a FIN on the other side, which
// reads as a clean end, and hold the tunnel (two fds, a connection-limit
// slot, the upstream's max_conns slot) for the half-close bound while the
// other side stays quiet. The other side's socket is closed with
// SO_LINGER 0, so its peer sees the reset it would have seen from a
// direct connection. Errors that follow rotor's own abort are not resets.
func (t *pumpedTunnel) reset(side string) {
	t.mu.Lock()
	if t.aborted {
		t.mu.Unlock()
		return
	}
	t.res.Reset = side
	t.res.ClientGone = side == resetClient && !t.upDone
	t.mu.Unlock()
	if side == resetClient {
		_ = t.up.SetLinger(0)
	} else {
		_ = t.client.SetLinger(0)
	}
	t.abort()
}

// watchEnded is the watchdog's end of the tunnel: a side it found gone is
// a reset; a silence (idle, half-closed) is recorded for the summary line.
func (t *pumpedTunnel) watchEnded(e watchEnd) {
	if e.gone != "" {
		t.reset(e.gone)
		return
	}
	t.mu.Lock()
	if !t.aborted {
		t.res.Cut, t.res.Silent = e.cut, e.silent
	}
	t.mu.Unlock()
	t.abort()
}

// halfClose sends FIN on c. When that fails (the peer reset, or c is
// closed) the tunnel is over: abort it. Closing c alone would drop the
// other direction's parked registration silently (the kernel forgets a
// closed descriptor's epoll entry) and leave that direction waiting for
// the watchdog's linger.
func (t *pumpedTunnel) halfClose(c *net.TCPConn) {
	if c.CloseWrite() != nil {
		t.abort()
	}
}

// lastDirection counts a finished direction; the last one ends the
// tunnel (and reports true). Its half-close is skipped: both sockets are
// read to their end or failed, so closing them sends the same FIN.
func (t *pumpedTunnel) lastDirection() bool {
	if t.left.Add(-1) != 0 {
		return false
	}
	t.mu.Lock()
	t.ended = true
	if t.fbTimer != nil {
		t.fbTimer.Stop()
	}
	wd := t.wd
	res := t.res
	t.mu.Unlock()
	wd.stop()
	_ = t.client.Close()
	_ = t.up.Close()
	t.end(res)
	return true
}
