// Package logbuf holds log lines in memory and writes them from one
// goroutine of its own, so that logging never blocks the goroutine that
// logs. A gateway writes one info line per tunnel and per forwarded
// request, often on the connection's goroutine before it answers or closes
// the client: written there, a stderr nobody reads (a slow docker logs
// driver, journald backpressure) stalled every connection, which piled up
// in CLOSE-WAIT; written one by one, each line was also a system call on
// the data path (about 5 % of rotor's CPU per short tunnel, issue #8).
//
// Info lines are held at most Config.Delay and written in batches;
// warnings and errors wake the writer at once. At most Config.Limit bytes
// are held: a line that does not fit is dropped and counted (Dropped), and
// the next batch written ends with one line saying how many were lost.
// Lines keep their order. Close writes what is held within a bound, so a
// stuck stderr cannot hang the exit.
//
// logbuf does not format lines (zerolog does) and does not retry a failed
// write: the lines of a failed write are counted as dropped.
package logbuf

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
)

const (
	// MaxDelay is the default bound on how long an info line is held.
	MaxDelay = 100 * time.Millisecond
	// DefaultLimit is the default bound on the bytes held: some 20,000
	// tunnel lines, a few seconds of a busy gateway.
	DefaultLimit = 4 << 20
	// DefaultCloseWait is the default bound on Close's wait for the held
	// lines to be written.
	DefaultCloseWait = 2 * time.Second
	// flushSize wakes the writer before the delay is up.
	flushSize = 32 << 10
)

// ErrBlocked is returned by Close when out did not take the held lines
// within Config.CloseWait; they are dropped.
var ErrBlocked = errors.New("logbuf: log output blocked: held lines dropped")

// Config is a Writer's settings; the zero value is the defaults.
type Config struct {
	// Delay bounds how long an info line is held before it is written;
	// 0 means MaxDelay.
	Delay time.Duration
	// Limit is the most bytes held for out, the batch being written
	// not included; a line that would exceed it is dropped. 0 means
	// DefaultLimit.
	Limit int
	// CloseWait bounds how long Close waits for out; 0 means
	// DefaultCloseWait.
	CloseWait time.Duration
	// Notice formats the line written after dropped lines (n of them);
	// nil means NoticeJSON.
	Notice func(n uint64) []byte
}

// NoticeJSON is the default Config.Notice: a zerolog JSON warning.
func NoticeJSON(n uint64) []byte {
	var b bytes.Buffer
	l := zerolog.New(&b)
	l.Warn().Timestamp().Uint64("dropped", n).Msg(fmt.Sprintf("%d log lines dropped: stderr was not being read", n))
	return b.Bytes()
}

// Writer is a zerolog.LevelWriter that never blocks its caller on out.
// It is safe for concurrent use; each Write holds one whole line. Its
// goroutine (the writer) starts in New and ends in Close.
type Writer struct {
	out io.Writer
	cfg Config

	wake chan struct{} // capacity 1: a first held line, a warning, a full batch
	quit chan struct{} // closed by Close: write what is held and end
	done chan struct{} // closed when the writer has ended
	stop sync.Once

	dropped atomic.Uint64 // lines dropped since New, for Dropped
	outMu   sync.Mutex    // serialises direct writes after the writer ended

	mu     sync.Mutex // guards the fields below; never held across out.Write
	buf    []byte     // held lines, in order
	spare  []byte     // the last batch's buffer, reused
	urgent bool       // buf holds a warning or reached flushSize
	gap    uint64     // lines dropped since the last batch: the notice follows the next one
	direct bool       // the writer ended in time: callers write to out themselves
	stuck  bool       // Close gave up on out: lines are dropped
}

// New starts a Writer writing to out; Close ends it.
func New(out io.Writer, cfg Config) *Writer {
	if cfg.Delay <= 0 {
		cfg.Delay = MaxDelay
	}
	if cfg.Limit <= 0 {
		cfg.Limit = DefaultLimit
	}
	if cfg.CloseWait <= 0 {
		cfg.CloseWait = DefaultCloseWait
	}
	if cfg.Notice == nil {
		cfg.Notice = NoticeJSON
	}
	w := &Writer{out: out, cfg: cfg, wake: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go w.run() // owner: w; ends after Close, once what is held is written or out is given up
	return w
}

// Write holds p (one log line) as an info line.
func (w *Writer) Write(p []byte) (int, error) {
	return w.WriteLevel(zerolog.InfoLevel, p)
}

// WriteLevel holds p for the writer, waking it at once when level is warn
// or above. It never waits for out and never fails: a line that does not
// fit in Config.Limit is dropped and counted (an error would make zerolog
// write to os.Stderr itself, synchronously).
func (w *Writer) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	w.mu.Lock()
	if w.direct {
		w.mu.Unlock()
		return w.writeDirect(p)
	}
	if w.stuck || len(w.buf)+len(p) > w.cfg.Limit {
		w.gap++
		w.mu.Unlock()
		w.dropped.Add(1)
		w.kick() // the notice is owed even when nothing else is held
		return len(p), nil
	}
	first := len(w.buf) == 0
	w.buf = append(w.buf, p...)
	now := (level >= zerolog.WarnLevel && level != zerolog.NoLevel) || len(w.buf) >= flushSize
	w.urgent = w.urgent || now
	w.mu.Unlock()
	if first || now {
		w.kick()
	}
	return len(p), nil
}

// kick wakes the writer without waiting.
func (w *Writer) kick() {
	select {
	case w.wake <- struct{}{}:
	default: // the writer is already due to look
	}
}

// writeDirect writes a line logged after the writer ended: while the
// process exits, a line must not wait for a batch that never comes.
func (w *Writer) writeDirect(p []byte) (int, error) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	if _, err := w.out.Write(p); err != nil {
		w.dropped.Add(1)
	}
	return len(p), nil
}

// Dropped returns how many lines were dropped since New: held past
// Config.Limit, lost in a failed write, or given up by Close.
func (w *Writer) Dropped() uint64 { return w.dropped.Load() }

// Close writes what is held and ends the writer, waiting at most
// Config.CloseWait. When out blocks longer, the held lines are dropped,
// later lines too, and Close returns ErrBlocked; the writer then ends when
// out's Write returns (at once when out has SetWriteDeadline, as a pipe
// does). After a Close in time, lines are written to out by their caller.
func (w *Writer) Close() error {
	w.stop.Do(func() { close(w.quit) })
	t := time.NewTimer(w.cfg.CloseWait)
	defer t.Stop()
	select {
	case <-w.done:
		return nil
	case <-t.C:
	}
	w.mu.Lock()
	if w.direct { // ended as the timer fired
		w.mu.Unlock()
		return nil
	}
	if !w.stuck {
		w.stuck = true
		n := uint64(bytes.Count(w.buf, []byte{'\n'}))
		w.buf = nil
		w.dropped.Add(n)
	}
	w.mu.Unlock()
	if d, ok := w.out.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(time.Unix(1, 0)) // in the past: the blocked Write returns
	}
	return ErrBlocked
}

// run is the writer: it waits for a first held line, holds the batch up
// to Delay unless woken for a warning or a full batch, and writes it.
func (w *Writer) run() {
	defer close(w.done)
	delay := time.NewTimer(w.cfg.Delay)
	delay.Stop()
	for {
		select {
		case <-w.wake:
		case <-w.quit:
			w.finish()
			return
		}
		w.mu.Lock()
		hold := !w.urgent && len(w.buf) > 0
		w.mu.Unlock()
		if hold {
			delay.Reset(w.cfg.Delay)
			select {
			case <-delay.C:
			case <-w.wake: // a warning or a full batch
			case <-w.quit:
			}
			delay.Stop()
		}
		if _, ok, _ := w.writeBatch(); !ok {
			return
		}
	}
}

// finish writes batches until nothing is held, then hands out to the
// callers (direct). It stops early when Close gave up on out, and after a
// failed write (a closed stderr fails every write: what is held is lost).
func (w *Writer) finish() {
	for {
		wrote, ok, err := w.writeBatch()
		if !ok {
			return
		}
		if wrote && err == nil {
			continue
		}
		w.mu.Lock()
		if err != nil {
			w.dropped.Add(uint64(bytes.Count(w.buf, []byte{'\n'})))
			w.buf, w.gap = nil, 0
		}
		done := len(w.buf) == 0 && w.gap == 0
		w.direct = done
		w.mu.Unlock()
		if done {
			return
		}
	}
}

// writeBatch takes what is held and writes it, followed by the notice of
// lines dropped since the last batch. It reports whether it wrote
// anything, ok false when Close gave up on out, and out's error.
func (w *Writer) writeBatch() (wrote, ok bool, err error) {
	w.mu.Lock()
	if w.stuck {
		w.mu.Unlock()
		return false, false, nil
	}
	batch, gap := w.buf, w.gap
	if len(batch) == 0 && gap == 0 {
		w.mu.Unlock()
		return false, true, nil
	}
	w.buf, w.spare, w.gap, w.urgent = w.spare[:0], nil, 0, false
	w.mu.Unlock()

	lines := len(batch)
	if gap > 0 {
		batch = append(batch, w.cfg.Notice(gap)...)
	}
	n, err := w.out.Write(batch)
	if err != nil {
		// The lines not written are lost; the notice, if it did not
		// get out whole, is owed again.
		lost := uint64(0)
		if n < lines {
			lost = uint64(bytes.Count(batch[n:lines], []byte{'\n'}))
			w.dropped.Add(lost)
		}
		if n < len(batch) {
			lost += gap
		}
		w.mu.Lock()
		w.gap += lost
		w.mu.Unlock()
	}
	// A large burst must not pin a large buffer for the process's life.
	if cap(batch) <= 4*flushSize {
		w.mu.Lock()
		w.spare = batch[:0]
		w.mu.Unlock()
	}
	return true, true, err
}
