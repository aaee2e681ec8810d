// Package logbuf batches log lines into fewer writes. A gateway writes one
// info line per tunnel and per forwarded request; written one by one, each
// is a system call on the data path (about 5 % of rotor's CPU per short
// tunnel). Lines are held at most MaxDelay, warnings and errors are written
// at once together with everything before them, and Flush/Close write what
// is held, so only a crash can lose lines, and at most MaxDelay's worth.
package logbuf

import (
	"io"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

const (
	// MaxDelay bounds how long an info line waits in the buffer.
	MaxDelay = 100 * time.Millisecond
	// flushSize is written at once when the buffer reaches it.
	flushSize = 32 << 10
)

// Writer is a zerolog.LevelWriter that batches lines below warn level.
// It is safe for concurrent use; each Write holds one whole line.
type Writer struct {
	out   io.Writer
	delay time.Duration

	mu     sync.Mutex // guards the fields below and writes to out
	buf    []byte
	timer  *time.Timer // pending flush of buf, nil when none
	closed bool
	err    error // the last write error, returned by the next Write
}

// New returns a Writer that writes to out, holding lines at most delay
// (MaxDelay when delay <= 0).
func New(out io.Writer, delay time.Duration) *Writer {
	if delay <= 0 {
		delay = MaxDelay
	}
	return &Writer{out: out, delay: delay}
}

// Write buffers p (one log line) and schedules a flush.
func (w *Writer) Write(p []byte) (int, error) {
	return w.WriteLevel(zerolog.InfoLevel, p)
}

// WriteLevel buffers p, or writes it at once with everything held when
// level is warn or above, the Writer is closed, or the buffer is full.
func (w *Writer) WriteLevel(level zerolog.Level, p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.err; err != nil {
		w.err = nil
		return 0, err
	}
	now := w.closed || (level >= zerolog.WarnLevel && level != zerolog.NoLevel)
	if now && len(w.buf) == 0 {
		return w.out.Write(p)
	}
	w.buf = append(w.buf, p...)
	if now || len(w.buf) >= flushSize {
		if err := w.flushLocked(); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if w.timer == nil {
		w.timer = time.AfterFunc(w.delay, w.timed)
	}
	return len(p), nil
}

// timed is the delayed flush. A write error is kept for the next Write.
func (w *Writer) timed() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.timer = nil
	if err := w.flushLocked(); err != nil {
		w.err = err
	}
}

// Flush writes everything held.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

// Close flushes and makes later lines unbuffered (lines logged while the
// process exits are not held for a flush that would never come).
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.out.Write(w.buf)
	// A large burst must not pin a large buffer for the process's life.
	if cap(w.buf) > 4*flushSize {
		w.buf = nil
	} else {
		w.buf = w.buf[:0]
	}
	return err
}
