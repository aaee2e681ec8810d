package logbuf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// blockedPipe is an os.Pipe whose reader reads nothing until the test
// says so: a stderr nobody reads. Both ends close at cleanup.
func blockedPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

// logFrom logs lines lines from each of goroutines goroutines (every
// tenth a warning) and fails unless all of them return within 20s.
func logFrom(t *testing.T, log zerolog.Logger, goroutines, lines int) {
	t.Helper()
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() { // owner: logFrom; ends after its lines (or at cleanup when it blocks)
			defer wg.Done()
			for i := range lines {
				e := log.Info()
				if i%10 == 0 {
					e = log.Warn()
				}
				e.Int("g", g).Int("i", i).Str("pad", strings.Repeat("p", 60)).Msg("tunnel")
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // owner: logFrom; ends with the loggers
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("loggers still blocked 20s later: a log call waits for the pipe")
	}
}

// A pipe nobody reads never blocks a logger: lines past Limit are
// dropped and counted, Close gives up within CloseWait, and the writer
// goroutine ends (no leak). Bug: every log call waited for the pipe, so
// a stalled stderr stalled every connection.
func TestBlockedPipeNeverBlocksLoggers(t *testing.T) {
	_, pw := blockedPipe(t)
	w := New(pw, Config{Limit: 64 << 10, CloseWait: 200 * time.Millisecond})
	const goroutines, lines = 32, 500
	logFrom(t, zerolog.New(w), goroutines, lines)
	if d := w.Dropped(); d == 0 || d > goroutines*lines {
		t.Fatalf("Dropped = %d of %d lines into a full pipe, want some", d, goroutines*lines)
	}
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }() // owner: the test; ends within CloseWait
	select {
	case err := <-closed:
		if !errors.Is(err, ErrBlocked) {
			t.Fatalf("Close on a full pipe: %v, want ErrBlocked", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Close still waiting for a full pipe 20s later")
	}
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer goroutine is still blocked in the pipe's Write after Close")
	}
	before := w.Dropped()
	if _, err := w.Write([]byte("after close\n")); err != nil || w.Dropped() != before+1 {
		t.Fatalf("a line after Close gave up: %v, dropped %d → %d, want counted", err, before, w.Dropped())
	}
}

// When the reader comes back, the lines held get out in order, followed
// by one line saying how many were dropped, and the counts add up.
func TestStalledPipeResumesWithNotice(t *testing.T) {
	pr, pw := blockedPipe(t)
	w := New(pw, Config{Limit: 16 << 10, Delay: time.Millisecond})
	const lines = 5000
	logFrom(t, zerolog.New(w), 1, lines)
	var out bytes.Buffer
	read := make(chan error, 1)
	go func() { _, err := io.Copy(&out, pr); read <- err }() // owner: the test; ends when pw is closed
	if err := w.Close(); err != nil {
		t.Fatalf("Close with the reader back: %v", err)
	}
	pw.Close()
	if err := <-read; err != nil {
		t.Fatal(err)
	}
	var seen, notices, dropped uint64
	last := -1
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l struct {
			Message string
			I       int
			Dropped uint64
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("broken line %q: %v", sc.Text(), err)
		}
		if l.Dropped > 0 {
			notices++
			dropped += l.Dropped
			continue
		}
		if l.I <= last {
			t.Fatalf("line %d after line %d: order lost", l.I, last)
		}
		last = l.I
		seen++
	}
	if dropped == 0 || notices == 0 || dropped != w.Dropped() || seen+dropped != lines {
		t.Fatalf("%d lines written, %d notices of %d dropped (Dropped %d), want some dropped and %d in all", seen, notices, dropped, w.Dropped(), lines)
	}
}
