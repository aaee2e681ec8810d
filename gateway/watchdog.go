package gateway

import (
	"errors"
	"net"
	"sync"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// watchdog watches a spliced tunnel without touching its bytes: it samples
// the kernel's per-socket receive counters (TCP_INFO: bytes received and
// time since the last data arrived) on a timer, so the zero-copy path stays
// free of per-byte wrappers. It detects
//   - a stalled body: the response had started, then the client sent data
//     and waited slow_body.stall with nothing back from the upstream side
//     (waiting counts from the client's last byte sent upstream, see
//     sinceSent, so a long upload after an early answer is not a stall).
//     It is reported at once and the tunnel is left to the client (a slow
//     answer may still come; tearing down would only lose it). An idle
//     keep-alive or websocket where nobody waits is not slow. A stall in
//     the middle of a response to a request sent before the response began
//     cannot be told apart from a finished response inside TLS, so it is
//     only detected on plain-HTTP forwarding, where rotor parses responses;
//   - an idle tunnel (tunnel_idle_timeout): no data either way;
//   - a half-closed tunnel (one side finished sending) whose other side
//     stays silent for halfClosedSilence;
//   - a side that is gone while no direction reads its socket: the kernel
//     closed it (a reset, e.g. the answer to a keep-alive probe once the
//     peer's socket is gone, or keep-alive giving up on a silent host).
//     A pump reading the socket sees that itself, but after a half-close
//     nothing reads the side that finished.
//
// Timers run only while the tunnel is open; no goroutine waits between
// checks (time.AfterFunc).
type watchdog struct {
	client, up  statsReader
	stall, idle time.Duration
	tick        time.Duration
	halfSilence time.Duration // halfClosedSilence: the bound on a half-closed tunnel's silence
	onStall     func(*health.Failure)
	onEnd       func(watchEnd) // the watchdog ends the tunnel (called once)
	baseU       uint64         // upstream bytes when the tunnel started (handshake excluded)

	// keepAlive is the upstream connection, whose TCP keep-alive the first
	// check turns on (it was dialled without: see enableKeepAlive).
	keepAlive net.Conn

	mu         sync.Mutex // guards the fields below
	timer      *time.Timer
	finished   bool
	reported   bool // one stall report per tunnel
	clientDone bool // the client finished sending: halfSilence applies
	upDone     bool // the upstream side finished sending: halfSilence applies
}

// Why the watchdog closed a tunnel after a silence (watchEnd.cut, the
// summary line's "cut" field, with "silent" the bound that ran out).
const (
	cutIdle       = "idle"        // tunnel_idle_timeout: no data either way
	cutHalfClosed = "half_closed" // one side had finished sending and the other stayed silent (halfClosedSilence)
)

// watchEnd is why the watchdog ends a tunnel: a silence (cut, silent) or a
// side whose socket the kernel closed (gone: resetClient, resetUpstream).
type watchEnd struct {
	cut    string
	silent time.Duration
	gone   string
}

// halfClosedSilence is how long the side still open of a half-closed
// tunnel may stay silent before the tunnel is closed. TCP cannot tell a
// client that closed and left (requests and aiohttp close so when their
// timeout fires) from one that only shut down its sending side and still
// reads, so a bound is needed, or clients that give up on slow targets
// would pile up tunnels, fds and upstream slots. It follows
// tunnel_idle_timeout when that is set, shorter or longer than the
// default: an operator who lets idle tunnels live 10 minutes lets a
// half-closed one wait as long for its answer. With tunnel_idle_timeout 0
// ("never") it is halfCloseLinger, 60 s: "never" keeps tunnels whose
// both sides are open, which a client that left cannot hold (its kernel
// answers the keep-alive probes with a reset). Silence counts from the
// last byte, so a target that keeps sending is never cut.
func halfClosedSilence(idle time.Duration) time.Duration {
	if idle > 0 {
		return idle
	}
	return halfCloseLinger()
}

// upstreamDone is halfClosed for the other direction: the client may go on
// sending, but once it has been silent for halfSilence the tunnel is
// closed. It reports false when there is no watchdog to do it.
func (w *watchdog) upstreamDone() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	w.upDone = true
	w.mu.Unlock()
	return true
}

// halfClosed tells the watchdog the client finished sending (a FIN: it
// half-closed, or closed and left): the upstream side may go on answering,
// but once it has been silent for halfSilence the tunnel is closed, so a
// client that left without a word cannot hold a tunnel, its fds and an
// upstream slot for ever. It reports false when there is no watchdog to
// do it.
func (w *watchdog) halfClosed() bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	w.clientDone = true
	w.mu.Unlock()
	return true
}

// tcpStats is what the watchdog reads of a socket (Linux TCP_INFO).
type tcpStats struct {
	rxBytes  uint64        // tcpi_bytes_received: bytes the peer sent that the kernel accepted
	lastRecv time.Duration // tcpi_last_data_recv: since data last arrived
	lastSent time.Duration // tcpi_last_data_sent: since a segment carrying data last left
	// rto: tcpi_retransmits > 0, the peer stopped acknowledging and the
	// kernel is retransmitting on timeouts; lastSent then stamps those
	// retransmissions, not new data.
	rto bool
	// closed: tcpi_state is TCP_CLOSE while rotor still holds the socket:
	// the kernel ended the connection (a reset arrived, or keep-alive or
	// retransmissions gave up). The peer is gone.
	closed bool
}

// statsReader reads a socket's counters.
type statsReader interface {
	stats() (tcpStats, bool)
}

// startWatchdog returns nil when the sockets give no counters (not Linux,
// not TCP).
func startWatchdog(client, up net.Conn, stall, idle time.Duration, onStall func(*health.Failure), onEnd func(watchEnd)) *watchdog {
	cc, ok1 := counterOf(client)
	uc, ok2 := counterOf(up)
	if !ok1 || !ok2 {
		enableKeepAlive(up)
		return nil
	}
	us, ok := uc.stats()
	if !ok {
		enableKeepAlive(up)
		return nil
	}
	// Checks run often enough for the shortest limit in force; the
	// half-close bound is always watched.
	half := halfClosedSilence(idle)
	tick := half
	for _, d := range []time.Duration{stall, idle} {
		if d > 0 && d < tick {
			tick = d
		}
	}
	tick /= 4
	if tick < 50*time.Millisecond {
		tick = 50 * time.Millisecond
	}
	w := &watchdog{client: cc, up: uc, stall: stall, idle: idle, tick: tick, halfSilence: half, onStall: onStall, onEnd: onEnd,
		baseU: us.rxBytes, keepAlive: up}
	w.mu.Lock()
	w.timer = time.AfterFunc(tick, w.check)
	w.mu.Unlock()
	return w
}

func (w *watchdog) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.finished = true
	if w.timer != nil {
		w.timer.Stop()
	}
	w.mu.Unlock()
}

func (w *watchdog) check() {
	if c := w.keepAlive; c != nil {
		// Checks never overlap: the next one is scheduled below.
		w.keepAlive = nil
		enableKeepAlive(c)
	}
	cs, ok1 := w.client.stats()
	us, ok2 := w.up.stats()
	w.mu.Lock()
	if w.finished || !ok1 || !ok2 {
		w.mu.Unlock()
		return
	}
	cAgo, uAgo := cs.lastRecv, us.lastRecv
	// The client has been waiting for stall: its last byte sent upstream
	// is that old and nothing came back since. (Measuring from the
	// client's last send, not the upstream's, keeps a long upload from
	// counting as a stall.)
	sent := waitingSince(cs, us)
	stalled := w.stall > 0 && us.rxBytes != w.baseU && sent+stampSlack < uAgo && sent >= w.stall
	var end watchEnd
	switch {
	case cs.closed:
		end.gone = resetClient
	case us.closed:
		end.gone = resetUpstream
	case (w.clientDone && uAgo >= w.halfSilence) || (w.upDone && cAgo >= w.halfSilence):
		end = watchEnd{cut: cutHalfClosed, silent: w.halfSilence}
	case w.idle > 0 && cAgo >= w.idle && uAgo >= w.idle:
		end = watchEnd{cut: cutIdle, silent: w.idle}
	}
	ending := end != watchEnd{}
	if ending {
		w.finished = true
	} else {
		// A stall already reported keeps the checks going: the
		// idle and half-close bounds and a gone side still apply.
		w.timer.Reset(w.tick)
	}
	if stalled {
		stalled = !w.reported // one report per tunnel
		w.reported = true
	}
	w.mu.Unlock()
	if stalled {
		w.onStall(&health.Failure{Class: health.SlowBody, Stage: health.StageBody,
			Err: errors.New("upstream side silent for slow_body.stall while the client waits")})
	}
	if ending {
		w.onEnd(end)
	}
}

// sinceSent reports how long ago the client's data last went to the
// upstream side (see waitingSince); false when the sockets give no
// counters any more (closed). The first-byte clock of a pumped tunnel
// reads it when it runs out, so that it counts from the client's last
// byte sent upstream rather than its first at no cost per burst: a long
// upload is not a slow answer (the server legitimately waits for the end
// of the request).
func (w *watchdog) sinceSent() (time.Duration, bool) {
	if w == nil {
		return 0, false
	}
	cs, ok1 := w.client.stats()
	us, ok2 := w.up.stats()
	if !ok1 || !ok2 {
		return 0, false
	}
	return waitingSince(cs, us), true
}

// waitingSince is how long the client has been waiting for the upstream
// side, from the kernel's stamps: since the last data segment left for
// the upstream (the kernel stamps it, nothing wraps the copy), or since
// the client's data last arrived if that is more recent (bytes on their
// way through rotor). While the upstream socket retransmits on timeouts
// its stamp only says the kernel is retrying, so a peer that swallows
// everything is timed from the client's last arrival instead.
func waitingSince(client, up tcpStats) time.Duration {
	ago := up.lastSent
	if up.rto || client.lastRecv < ago {
		ago = client.lastRecv
	}
	return ago
}

// stampSlack is how much more recent the client's last send must look than
// the upstream side's last arrival before the client counts as waiting.
// The kernel stamps both in jiffies (10 ms at HZ=100), and the two sockets
// are read one after the other, so a tick falling between the reads makes
// a request and its answer from the same jiffy look one jiffy apart, the
// request later: an idle keep-alive would be reported as a stall.
const stampSlack = 10 * time.Millisecond

// socketGone reports whether the kernel closed the TCP socket under c
// (tcpStats.closed): its peer reset it, or TCP gave up on it. False when
// the socket cannot tell (off Linux, closed by rotor, not TCP).
func socketGone(c net.Conn) bool {
	sr, ok := counterOf(c)
	if !ok {
		return false
	}
	st, ok := sr.stats()
	return ok && st.closed
}

// counterOf finds the TCP socket under c (through TLS and rotor's own
// buffered wrappers).
func counterOf(c net.Conn) (statsReader, bool) {
	if tc := tcpOf(c); tc != nil {
		return tcpCounter{tc}, true
	}
	return nil, false
}
