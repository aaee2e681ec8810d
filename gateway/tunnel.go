package gateway

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/internal/splice"
	"github.com/rotor-proxy/rotor/upstream"
)

// relayResult summarises one finished tunnel.
type relayResult struct {
	Up, Down  int64 // bytes client→upstream, upstream→client
	FirstByte time.Duration
	Failure   *health.Failure // slow body, observed after the client was answered
	Shutdown  bool            // the drain force-closed the tunnel (shutdown_grace over)

	// Reset names the side whose connection ended otherwise than by a
	// FIN (a reset, or TCP gave up on it): resetClient or resetUpstream.
	// The tunnel ended at once, the reset passed on to the other side.
	Reset string
	// ClientGone: the client's reset ended a tunnel whose upstream side
	// had not finished sending (outcome client_gone). A client that
	// resets after the whole answer came is not gone early.
	ClientGone bool
	// Cut is why the watchdog closed the tunnel (cutIdle, cutHalfClosed)
	// after Silent without data from the side it waited for.
	Cut    string
	Silent time.Duration
}

// Sides of a tunnel, as relayResult.Reset and the log's "reset" name them.
const (
	resetClient   = "client"
	resetUpstream = "upstream" // the connection to the upstream (to the target itself for direct)
)

// fields adds how the tunnel ended to its summary line: "reset" (the
// side whose connection was reset), "cut" and "silent" (ms) when the
// watchdog closed it after a silence.
func (r relayResult) fields(ev *zerolog.Event) *zerolog.Event {
	if r.Reset != "" {
		ev = ev.Str("reset", r.Reset)
	}
	if r.Cut != "" {
		ev = ev.Str("cut", r.Cut).Dur("silent", r.Silent)
	}
	return ev
}

// abortive reports whether a direction that ended with err ended
// abortively, i.e. not at the source's FIN (nil or io.EOF) and not by
// rotor's own doing: sockets it closed (abort, the drain: net.ErrClosed)
// or a deadline it set (the classic relay's linger and first byte).
func abortive(err error) bool {
	return err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) &&
		!errors.Is(err, os.ErrDeadlineExceeded)
}

// resetSide names the side whose connection failed when a direction from
// src to dst ended abortively: the one whose socket the kernel closed
// (socketGone: a reset arrived, or TCP gave up), src first, as a failed
// write to dst closes dst; src when neither says (its read failed, e.g.
// a TLS record error).
func resetSide(src, dst net.Conn, srcSide, dstSide string) string {
	if !socketGone(src) && socketGone(dst) {
		return dstSide
	}
	return srcSide
}

// passReset makes the coming close of c a reset (SO_LINGER 0), which is
// what c's peer would see from a direct connection whose other end reset,
// rather than a FIN that reads as a clean end.
func passReset(c net.Conn) {
	if tc := tcpOf(c); tc != nil {
		_ = tc.SetLinger(0)
	}
}

type closeWriter interface{ CloseWrite() error }

// halfCloseLinger is how long the other direction may stay silent after
// one side finished sending (half-close) before the tunnel is torn down,
// when tunnel_idle_timeout does not say (halfClosedSilence). Tests
// shorten it through setHalfCloseLinger.
func halfCloseLinger() time.Duration { return time.Duration(halfCloseLingerNs.Load()) }

var halfCloseLingerNs = func() *atomic.Int64 { var v atomic.Int64; v.Store(int64(60 * time.Second)); return &v }()

func setHalfCloseLinger(d time.Duration) { halfCloseLingerNs.Store(int64(d)) }

var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// relay copies bytes between client and up until both directions end, then
// closes both (closing twice is harmless; ownership ends here). pending are client bytes already read (pipelined
// after the handshake) that must reach the upstream first.
//
// Once the upstream side has answered (the first byte is timed), each
// direction hands over to io.Copy between the raw connections, so Linux
// splice(2) moves the bulk without a user-space copy. Until then the
// client→upstream direction copies burst by burst through a pooled buffer
// and stamps each burst: the first-byte deadline counts from the client's
// last byte sent upstream, not its first, because a server legitimately
// waits for the end of an upload (the stamp is one clock read per burst,
// and the deadline is only moved when it runs out).
//
// A direction that ends at its source's FIN half-closes the other side;
// one that ends abortively (a reset, see abortive) ends the tunnel at
// once, the reset passed on (pumpedTunnel.reset says why).
//
// report receives a slow-body failure the moment the watchdog sees it; a
// first-byte failure is returned in the result. answered (may be nil)
// runs once, when the first byte from the upstream side arrives: the
// evidence health weighs a first-byte silence against (firstByteFailure).
func relay(client, up net.Conn, pending []byte, slow SlowBodyConfig, idle time.Duration, report func(*health.Failure), answered func()) relayResult {
	defer client.Close()
	defer up.Close()
	var res relayResult
	// mu orders the first-byte deadline between the two directions and
	// guards res's Reset, ClientGone, Cut and Silent and the fields below.
	var mu sync.Mutex
	var closing bool  // rotor is closing the tunnel: later errors are its own
	var downDone bool // the upstream side finished sending (its FIN)
	// end closes the tunnel, once: for a reset on side when side is set
	// (passed on to the other side), after a silence when e says so.
	end := func(side string, e watchEnd) {
		mu.Lock()
		first := !closing
		if first {
			closing = true
			res.Reset = side
			res.ClientGone = side == resetClient && !downDone
			res.Cut, res.Silent = e.cut, e.silent
		}
		mu.Unlock()
		if !first {
			return
		}
		switch side {
		case resetClient:
			passReset(up)
		case resetUpstream:
			passReset(client)
		}
		_ = client.Close()
		_ = up.Close()
	}
	// failed ends the tunnel when the direction from src ended with an
	// abortive err, and reports whether it did.
	failed := func(err error, src, dst net.Conn, srcSide, dstSide string) bool {
		if !abortive(err) {
			return false
		}
		end(resetSide(src, dst, srcSide, dstSide), watchEnd{})
		return true
	}
	// lingerCut records that the absolute linger (no watchdog) ran out.
	lingerCut := func() {
		mu.Lock()
		if !closing {
			closing = true
			res.Cut, res.Silent = cutHalfClosed, halfClosedSilence(idle)
		}
		mu.Unlock()
	}
	wd := startWatchdog(client, up, slow.Stall, idle, report, func(e watchEnd) { end(e.gone, e) })
	defer wd.stop()
	var wg sync.WaitGroup
	var gotFirst atomic.Bool
	var sentAt time.Time
	base := time.Now()
	var lastSent atomic.Int64 // since base: the client's last burst was written upstream

	armFirstByte := func() {
		if slow.FirstByte <= 0 {
			return
		}
		mu.Lock()
		if !gotFirst.Load() && sentAt.IsZero() {
			sentAt = time.Now()
			_ = up.SetReadDeadline(sentAt.Add(slow.FirstByte))
		}
		mu.Unlock()
	}
	// rearmFirstByte runs when the first-byte deadline ran out: while the
	// client's last burst went up less than first_byte ago, it moves the
	// deadline to first_byte after that burst and reports true.
	rearmFirstByte := func() bool {
		mu.Lock()
		defer mu.Unlock()
		if sentAt.IsZero() || gotFirst.Load() {
			return false // not the first-byte deadline (the linger)
		}
		last := base.Add(time.Duration(lastSent.Load()))
		if last.Before(sentAt) {
			last = sentAt // the first write has not returned yet
		}
		if time.Since(last) >= slow.FirstByte-firstByteSlack {
			return false
		}
		_ = up.SetReadDeadline(last.Add(slow.FirstByte))
		return true
	}

	wg.Add(1)
	go func() { // client → upstream; ends when the client stops sending
		defer wg.Done()
		var n int64
		var err error
		if len(pending) > 0 {
			armFirstByte()
			var w int
			w, err = up.Write(pending)
			n += int64(w)
			lastSent.Store(int64(time.Since(base)))
		}
		if err == nil {
			bp := bufPool.Get().(*[]byte)
			for {
				// Burst by burst while the first byte is awaited; once
				// it came (or with no first-byte limit, after the first
				// burst) the bulk goes through copyConn.
				r, rerr := client.Read(*bp)
				err = rerr
				if r > 0 {
					armFirstByte()
					w, werr := up.Write((*bp)[:r])
					n += int64(w)
					lastSent.Store(int64(time.Since(base)))
					if werr != nil {
						err = werr
					}
				}
				if err != nil || slow.FirstByte <= 0 || gotFirst.Load() {
					break
				}
			}
			bufPool.Put(bp)
		}
		if err == nil {
			var c int64
			c, err = copyConn(up, client)
			n += c
		}
		res.Up = n
		if failed(err, client, up, resetClient, resetUpstream) {
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			lingerCut() // set by the other direction once it finished
		}
		closeWrite(up)
		_ = client.SetReadDeadline(time.Time{})
		if !wd.halfClosed() {
			// No watchdog (no socket counters): bound the rest of the
			// answer by an absolute linger instead.
			mu.Lock()
			if gotFirst.Load() || sentAt.IsZero() {
				_ = up.SetReadDeadline(time.Now().Add(halfClosedSilence(idle)))
			}
			mu.Unlock()
		}
	}()

	// upstream → client, on this goroutine.
	bp := bufPool.Get().(*[]byte)
	var r int
	var err error
	for {
		r, err = up.Read(*bp)
		if r > 0 || !errors.Is(err, os.ErrDeadlineExceeded) || !rearmFirstByte() {
			break
		}
	}
	mu.Lock()
	gotFirst.Store(true)
	started := sentAt
	if !started.IsZero() {
		_ = up.SetReadDeadline(time.Time{})
	}
	mu.Unlock()
	var down int64
	if r > 0 {
		if answered != nil {
			answered()
		}
		if !started.IsZero() {
			res.FirstByte = time.Since(started)
		}
		w, werr := client.Write((*bp)[:r])
		down += int64(w)
		if werr != nil {
			err = werr
		}
	}
	bufPool.Put(bp)
	switch {
	case err == nil:
		var c int64
		c, err = copyConn(client, up)
		down += c
	case errors.Is(err, os.ErrDeadlineExceeded) && !started.IsZero() && r == 0:
		res.Failure = firstByteFailure()
		// Tear down: the client asked and nothing is coming.
		end("", watchEnd{})
		err = nil
	}
	res.Down = down
	if !failed(err, up, client, resetUpstream, resetClient) {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			lingerCut() // set by the other direction once it finished
		}
		mu.Lock()
		downDone = !closing
		mu.Unlock()
		closeWrite(client)
		// The client may still be sending; give it a bounded time to finish.
		if !wd.upstreamDone() {
			_ = client.SetReadDeadline(time.Now().Add(halfClosedSilence(idle)))
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return res
}

// firstByteFailure is the slow_body failure of a tunnel whose client sent
// and got no byte back within slow_body.first_byte. It is scoped to the
// target: the proxy answered CONNECT, and one silent tunnel cannot tell a
// silent proxy from a target that accepts and never answers (a tarpit).
// Blamed on the upstream, any client could cool healthy upstreams one
// after another by tunnelling to such a host, and a scraper did so with
// one slow site. Health cools the upstream for that host only, and the
// upstream whole on evidence that the silence is its own: other upstreams'
// tunnels got answers from the hosts it was silent at (see
// health.Tracker.Answered, which runTunnel reports at each tunnel's first
// byte).
func firstByteFailure() *health.Failure {
	return &health.Failure{Class: health.SlowBody, Stage: health.StageFirstByte, Scope: health.ScopeTarget,
		Err: errors.New("no byte from the target through this upstream within slow_body.first_byte")}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(closeWriter); ok {
		if cw.CloseWrite() == nil {
			return
		}
	}
	_ = c.Close()
}

// runTunnel starts the relay of an established tunnel and returns: the
// tunnel runs on fresh goroutines, so the front's handler (its stack, and
// go-socks5's or net/http's buffers) is freed while the tunnel idles; with
// the server's reactor (Linux, raw TCP on both sides) an idle tunnel holds
// no goroutine at all (pumpedTunnel). The tunnel is counted in the drain
// registry and metrics, its slow-body failures are reported, and at its end
// the lease is released, onEnd runs (the connection-limit slot) and the one
// summary line is written.
func (s *Server) runTunnel(id uint64, front string, c net.Conn, lease *upstream.Lease, pending []byte, addr, user string, start time.Time, onEnd func()) {
	cfg := s.cfg.Load()
	s.metrics.dialLatency(lease.Setup)
	s.metrics.tunnelStart(front)
	s.tunnelWG.Add(1)
	direct := lease.Endpoint.Scheme() == "direct"
	finish := func(res relayResult) {
		res.Shutdown = s.tunnels.remove(id)
		s.metrics.tunnelEnd(front)
		if direct && res.Failure != nil {
			res.Failure.Scope = health.ScopeTarget // a stall too (firstByteFailure's is already)
		}
		s.finishLease(lease, addr, res)
		s.logTunnel(id, front, c, user, addr, lease, nil, res, start)
		onEnd()
		s.tunnelWG.Done()
	}
	report := s.stallReporter(id, front, lease, addr)
	if direct {
		// No proxy in between: a slow first byte or a stalled body can
		// only be the target's, so it cools direct for that host, never
		// for everything (whatever slow_body.scope says; with one direct
		// upstream a slow site would otherwise make the whole gateway
		// answer 503). Failure.Scope also feeds the target-failure rule:
		// slow at several hosts that other upstreams reach, direct cools.
		stall := report
		report = func(f *health.Failure) {
			f.Scope = health.ScopeTarget
			stall(f)
		}
	}
	answered := lease.Answered
	if t := newPumpedTunnel(s.reactor, c, lease.Conn, pending, cfg.SlowBody, cfg.TunnelIdleTimeout, report, answered, finish); t != nil {
		s.tunnels.add(id, t.abort) // before start: the tunnel may end at once
		t.start()
		return
	}
	s.tunnels.add(id, func() { _ = c.Close(); _ = lease.Conn.Close() })
	go func() { // owner: Server (tunnelWG); ends when both directions end or Shutdown force-closes
		finish(relay(c, lease.Conn, pending, cfg.SlowBody, cfg.TunnelIdleTimeout, report, answered))
	}()
}

// copyConn copies src to dst: splice without idle pipes between raw TCP
// connections (splice.Copy), io.Copy otherwise (TLS, buffered wrappers).
func copyConn(dst, src net.Conn) (int64, error) {
	d, ok1 := dst.(*net.TCPConn)
	s, ok2 := src.(*net.TCPConn)
	if ok1 && ok2 {
		return splice.Copy(d, s)
	}
	return io.Copy(dst, src)
}
