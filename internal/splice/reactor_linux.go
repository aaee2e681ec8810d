package splice

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Reactor parks idle copy directions. A direction with nothing to copy
// waits briefly in Go's netpoller (LingerWait), then is registered
// (one-shot) with the reactor's epoll set and its goroutine ends; when
// bytes or EOF arrive, a fresh goroutine copies the burst and so on. An idle tunnel so costs no goroutine and no pipe: its
// sockets, two Pump records and one epoll entry each.
//
// The epoll descriptor is itself waited on through Go's netpoller (it is
// readable while any registered socket is ready), so the reactor holds no
// OS thread while everything is idle.
type Reactor struct {
	ep *os.File        // the epoll descriptor, non-blocking, in Go's netpoller
	rc syscall.RawConn // of ep (its Control keeps the descriptor open during epoll_ctl)

	nextID atomic.Uint64
	closed atomic.Bool
	shards [parkShards]parkShard

	done chan struct{} // closed when the loop has ended
}

// parkShards spreads parked pumps over several locks, so that parking is
// not serialised on one mutex across cores.
const parkShards = 32

type parkShard struct {
	mu     sync.Mutex       // guards parked
	parked map[uint64]*Pump // by id
	_      [40]byte         // keep shards on separate cache lines
}

func (r *Reactor) shard(id uint64) *parkShard { return &r.shards[id%parkShards] }

// take removes and returns the pump parked under id, if any.
func (r *Reactor) take(id uint64) *Pump {
	sh := r.shard(id)
	sh.mu.Lock()
	p := sh.parked[id]
	delete(sh.parked, id)
	sh.mu.Unlock()
	return p
}

// pump states: only a compare-and-swap winner acts on a pump.
const (
	running int32 = iota
	parked
	finished
)

// smallBuf holds one burst read with read(2); bursts that fill it are
// bulk and go through splice(2) for the rest of the direction's life.
var smallBuf = sync.Pool{New: func() any { b := make([]byte, bulkHandoff); return &b }}

// NewReactor starts a reactor; its goroutine ends at Close.
func NewReactor() (*Reactor, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	ep := os.NewFile(uintptr(fd), "rotor-reactor")
	rc, err := ep.SyscallConn()
	if err != nil {
		_ = ep.Close()
		return nil, err
	}
	r := &Reactor{ep: ep, rc: rc, done: make(chan struct{})}
	for i := range r.shards {
		r.shards[i].parked = map[uint64]*Pump{}
	}
	go r.loop() // owner: Reactor; ends when Close closes ep
	return r, nil
}

// Close stops the reactor. Directions still parked are finished with
// net.ErrClosed (their sockets are left to their owners).
func (r *Reactor) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	err := r.ep.Close()
	<-r.done
	var left []*Pump
	for i := range r.shards {
		sh := &r.shards[i]
		sh.mu.Lock()
		for id, p := range sh.parked {
			left = append(left, p)
			delete(sh.parked, id)
		}
		sh.mu.Unlock()
	}
	for _, p := range left {
		if p.state.CompareAndSwap(parked, finished) {
			p.done(p.total, net.ErrClosed)
		}
	}
	return err
}

func (r *Reactor) loop() {
	defer close(r.done)
	var evs [128]unix.EpollEvent
	for {
		var n int
		var werr error
		err := r.rc.Read(func(fd uintptr) bool {
			n, werr = unix.EpollWait(int(fd), evs[:], 0)
			if werr == unix.EINTR {
				n, werr = 0, nil
			}
			// Wait in the netpoller only when nothing is ready: the
			// descriptor is edge-triggered there, so every ready entry
			// must be drained before waiting again.
			return werr != nil || n > 0
		})
		if err == nil {
			err = werr
		}
		if err != nil {
			return // closed
		}
		for i := range n {
			id := uint64(uint32(evs[i].Fd)) | uint64(uint32(evs[i].Pad))<<32
			if p := r.take(id); p != nil && p.state.CompareAndSwap(parked, running) {
				go p.run() // owner: the pump's tunnel (done reports its end)
			}
		}
	}
}

// Pump copies src to dst until EOF or an error, then calls done once with
// the bytes copied. Between bursts it holds no goroutine (see Reactor).
type Pump struct {
	r        *Reactor
	dst, src *net.TCPConn
	rc       syscall.RawConn // of src
	id       uint64
	added    bool // src is in the epoll set (re-arm with MOD)
	state    atomic.Int32
	prefix   []byte
	onData   func() // called once, before the first bytes are written
	total    int64
	done     func(n int64, err error)
}

// Pump starts copying src to dst: prefix first (bytes already read from
// src), then whatever src sends. onData (may be nil) runs once when the
// first bytes are about to be written to dst; done runs once at the end,
// on the pump's goroutine or on Stop's caller.
func (r *Reactor) Pump(dst, src *net.TCPConn, prefix []byte, onData func(), done func(n int64, err error)) *Pump {
	p := &Pump{r: r, dst: dst, src: src, prefix: prefix, onData: onData, done: done}
	rc, err := src.SyscallConn()
	if err != nil {
		p.state.Store(finished)
		go done(0, err)
		return p
	}
	p.rc = rc
	p.id = r.nextID.Add(1)
	go p.run() // owner: the pump's tunnel (done reports its end)
	return p
}

// Stop finishes a parked pump with net.ErrClosed at once. Call it after
// closing the pump's sockets: a running pump then fails on its own.
func (p *Pump) Stop() {
	if p.state.CompareAndSwap(parked, finished) {
		p.r.take(p.id)
		p.done(p.total, net.ErrClosed)
	}
}

func (p *Pump) finish(err error) {
	p.state.Store(finished)
	p.done(p.total, err)
}

func (p *Pump) first() {
	if p.onData != nil {
		p.onData()
		p.onData = nil
	}
}

// park registers src for one readiness event and returns; the event starts
// run on a new goroutine. The order matters: the pump is in its shard's map
// before it is marked parked, and marked parked before epoll_ctl arms it,
// so whoever wins the parked → x swap (the event, Stop, Close) finds it.
// A socket closed by its owner before epoll_ctl makes Control fail here;
// one closed after is finished by Stop (owners close, then Stop).
func (p *Pump) park() {
	r := p.r
	sh := r.shard(p.id)
	sh.mu.Lock()
	sh.parked[p.id] = p
	sh.mu.Unlock()
	p.state.Store(parked)
	if r.closed.Load() {
		// Close may have swept the shards before this pump was added.
		if p.state.CompareAndSwap(parked, finished) {
			r.take(p.id)
			p.done(p.total, net.ErrClosed)
		}
		return
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT,
		Fd: int32(uint32(p.id)), Pad: int32(uint32(p.id >> 32))}
	op := unix.EPOLL_CTL_MOD
	if !p.added {
		op = unix.EPOLL_CTL_ADD
	}
	// Set before arming: once armed, the event's goroutine may read it.
	p.added = true
	var cerr error
	err := r.rc.Control(func(epfd uintptr) {
		err := p.rc.Control(func(fd uintptr) {
			cerr = unix.EpollCtl(int(epfd), op, int(fd), &ev)
			if cerr == unix.ENOENT && op == unix.EPOLL_CTL_MOD {
				cerr = unix.EpollCtl(int(epfd), unix.EPOLL_CTL_ADD, int(fd), &ev)
			}
		})
		if err != nil {
			cerr = err
		}
	})
	if err == nil {
		err = cerr
	}
	if err == nil {
		return // the pump now belongs to the reactor (or to Stop)
	}
	if p.state.CompareAndSwap(parked, finished) {
		r.take(p.id)
		p.done(p.total, err)
	}
}

// run copies what is queued, waits a little for more (linger), then
// parks; a burst that fills the read buffer is bulk and goes through
// splice(2) with a pipe of its own until it runs dry (bulk).
func (p *Pump) run() {
	if len(p.prefix) > 0 {
		p.first()
		n, err := p.dst.Write(p.prefix)
		p.total += int64(n)
		p.prefix = nil
		if err != nil {
			p.finish(err)
			return
		}
	}
	for {
		bp := smallBuf.Get().(*[]byte)
		next, err := p.bursts(*bp)
		smallBuf.Put(bp) // before waiting or a long bulk copy: idle holds no buffer
		switch next {
		case parkNext:
			if p.linger() {
				continue
			}
			p.park()
		case bulkNext:
			next, err := p.bulk()
			if next == parkNext {
				p.park() // the bulk ran dry and lingered: pipe closed, nothing held
				return
			}
			p.finish(err)
		default:
			p.finish(err)
		}
		return
	}
}

// LingerWait is how long a direction that ran dry waits for more in Go's
// netpoller before it parks in the reactor. Request/response traffic and
// the end of a short tunnel usually come back within it, and waiting
// there costs no system call, where parking costs an epoll_ctl and a
// goroutine start on the next burst; a direction idle for longer than
// this holds nothing.
const LingerWait = 250 * time.Millisecond

// linger waits up to LingerWait for src to become readable; it reports
// false when the wait ran out. A closed socket ends the wait too (true):
// the next read reports it.
func (p *Pump) linger() bool {
	if p.src.SetReadDeadline(time.Now().Add(LingerWait)) != nil {
		return true
	}
	waited := false
	err := p.rc.Read(func(uintptr) bool {
		// The read that just failed with EAGAIN needs no repeat: wait
		// once, then let bursts read (a spurious wake-up costs one
		// EAGAIN and another linger).
		if waited {
			return true
		}
		waited = true
		return false
	})
	_ = p.src.SetReadDeadline(time.Time{})
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

const (
	finishNext = iota
	parkNext
	bulkNext
)

// bursts reads and writes what src has queued, with read(2) into buf,
// until src would block (parkNext), a read fills buf (bulkNext), or EOF or
// an error ends the direction.
func (p *Pump) bursts(buf []byte) (int, error) {
	for {
		var n int
		var rerr error
		err := p.rc.Control(func(fd uintptr) {
			n, rerr = unix.Read(int(fd), buf)
		})
		if err == nil {
			err = rerr
		}
		switch {
		case err == unix.EAGAIN || err == unix.EINTR:
			return parkNext, nil
		case err != nil:
			return finishNext, err
		case n == 0:
			return finishNext, nil // EOF
		}
		p.first()
		w, werr := p.dst.Write(buf[:n])
		p.total += int64(w)
		if werr != nil {
			return finishNext, werr
		}
		if n == len(buf) {
			return bulkNext, nil
		}
	}
}

// maxSplice is the most one splice(2) moves, and the pipe size asked for
// (the default pipe-max-size); Go's own splice path uses the same.
const maxSplice = 1 << 20

// bulk moves src to dst with splice(2) through a pipe it owns, until src
// stays silent for LingerWait (parkNext: the pipe is closed, so a tunnel
// that went quiet after a download holds no pipe) or EOF or an error ends
// the direction (finishNext). Without a pipe (fd limit) it falls back to
// io.Copy until the end.
func (p *Pump) bulk() (int, error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		n, err := io.Copy(p.dst, p.src)
		p.total += n
		return finishNext, err
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	_, _ = unix.FcntlInt(uintptr(fds[1]), unix.F_SETPIPE_SZ, maxSplice)
	wrc, err := p.dst.SyscallConn()
	if err != nil {
		return finishNext, err
	}
	const flags = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK
	for {
		// src → pipe, waiting in the netpoller up to LingerWait.
		if err := p.src.SetReadDeadline(time.Now().Add(LingerWait)); err != nil {
			return finishNext, err
		}
		var n int64
		var serr error
		err := p.rc.Read(func(fd uintptr) bool {
			n, serr = unix.Splice(int(fd), nil, fds[1], nil, maxSplice, flags)
			return serr != unix.EAGAIN && serr != unix.EINTR
		})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if err := p.src.SetReadDeadline(time.Time{}); err != nil {
				return finishNext, err
			}
			return parkNext, nil
		}
		if err == nil {
			err = serr
		}
		if err != nil {
			return finishNext, err
		}
		if n == 0 {
			return finishNext, nil // EOF
		}
		// pipe → dst, all of it, waiting for dst as long as it takes.
		for n > 0 {
			var m int64
			var werr error
			err := wrc.Write(func(fd uintptr) bool {
				m, werr = unix.Splice(fds[0], nil, int(fd), nil, int(n), flags)
				return werr != unix.EAGAIN && werr != unix.EINTR
			})
			if err == nil {
				err = werr
			}
			if err != nil {
				return finishNext, err
			}
			if m <= 0 {
				return finishNext, io.ErrShortWrite
			}
			n -= m
			p.total += m
		}
	}
}
