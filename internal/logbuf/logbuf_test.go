package logbuf

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// sink records every write to it, one entry per Write call.
type sink struct {
	mu     sync.Mutex
	writes []string
	err    error
}

func (s *sink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return 0, s.err
	}
	s.writes = append(s.writes, string(p))
	return len(p), nil
}

func (s *sink) all() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.writes, "")
}

func (s *sink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.writes)
}

// waitFor polls until cond holds, failing after 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestInfoLinesAreBatched(t *testing.T) {
	s := &sink{}
	w := New(s, 50*time.Millisecond)
	log := zerolog.New(w)
	for i := 0; i < 10; i++ {
		log.Info().Int("i", i).Msg("tunnel")
	}
	if n := s.count(); n != 0 {
		t.Fatalf("%d writes before the delay, want 0 (lines are held)", n)
	}
	waitFor(t, "the held lines are written", func() bool { return s.count() > 0 })
	if n := s.count(); n != 1 {
		t.Fatalf("%d writes for 10 lines, want 1 batch", n)
	}
	for i := 0; i < 10; i++ {
		if !strings.Contains(s.all(), fmt.Sprintf(`"i":%d,`, i)) {
			t.Fatalf("line %d missing from %q", i, s.all())
		}
	}
	if got := strings.Count(s.all(), "\n"); got != 10 {
		t.Fatalf("%d lines written, want 10", got)
	}
}

func TestWarningsFlushEverythingAtOnce(t *testing.T) {
	s := &sink{}
	w := New(s, time.Hour) // a timed flush would never come in this test
	log := zerolog.New(w)
	log.Info().Msg("first")
	log.Debug().Msg("second")
	log.Warn().Msg("third")
	got := s.all()
	if s.count() != 1 || !(strings.Index(got, "first") < strings.Index(got, "second") &&
		strings.Index(got, "second") < strings.Index(got, "third")) || !strings.Contains(got, "first") {
		t.Fatalf("after a warning: %d writes %q, want one write with first, second, third in order", s.count(), got)
	}
	log.Error().Msg("alone")
	if s.count() != 2 || s.writes[1] != `{"level":"error","message":"alone"}`+"\n" {
		t.Fatalf("an error with nothing held: writes %q", s.writes)
	}
}

func TestFullBufferIsWritten(t *testing.T) {
	s := &sink{}
	w := New(s, time.Hour)
	line := append(bytes.Repeat([]byte("x"), 1023), '\n')
	for i := 0; i < flushSize/len(line); i++ {
		if _, err := w.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if s.count() != 1 || len(s.all()) != flushSize {
		t.Fatalf("after %d bytes: %d writes of %d bytes, want one of %d", flushSize, s.count(), len(s.all()), flushSize)
	}
}

func TestCloseFlushesAndStopsHolding(t *testing.T) {
	s := &sink{}
	w := New(s, time.Hour)
	_, _ = w.Write([]byte("held\n"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if s.all() != "held\n" {
		t.Fatalf("after Close: %q", s.all())
	}
	_, _ = w.Write([]byte("late\n"))
	if s.all() != "held\nlate\n" {
		t.Fatalf("a line after Close is held: %q", s.all())
	}
}

func TestFlush(t *testing.T) {
	s := &sink{}
	w := New(s, time.Hour)
	_, _ = w.Write([]byte("a\n"))
	_, _ = w.Write([]byte("b\n"))
	if err := w.Flush(); err != nil || s.all() != "a\nb\n" {
		t.Fatalf("Flush: %v, written %q", err, s.all())
	}
	if err := w.Flush(); err != nil || s.count() != 1 {
		t.Fatalf("second Flush: %v, %d writes, want no new write", err, s.count())
	}
}

func TestWriteErrorsAreReported(t *testing.T) {
	boom := errors.New("disk full")
	s := &sink{err: boom}
	w := New(s, 10*time.Millisecond)
	if _, err := w.WriteLevel(zerolog.WarnLevel, []byte("w\n")); !errors.Is(err, boom) {
		t.Fatalf("immediate write: err %v, want %v", err, boom)
	}
	if _, err := w.Write([]byte("held\n")); err != nil {
		t.Fatalf("held write: %v", err)
	}
	// The timed flush fails; the next Write returns its error.
	waitFor(t, "the timed flush runs", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.timer == nil
	})
	if _, err := w.Write([]byte("next\n")); !errors.Is(err, boom) {
		t.Fatalf("write after a failed flush: err %v, want %v", err, boom)
	}
}

// Concurrent loggers never interleave inside a line, and every line is
// written once.
func TestConcurrentLinesStayWhole(t *testing.T) {
	s := &sink{}
	w := New(s, time.Millisecond)
	log := zerolog.New(w)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				log.Info().Int("g", g).Int("i", i).Msg("m" + strings.Repeat("y", i%100))
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(s.all(), "\n"), "\n")
	if len(lines) != 8*500 {
		t.Fatalf("%d lines, want %d", len(lines), 8*500)
	}
	seen := map[string]bool{}
	for _, l := range lines {
		if !strings.HasPrefix(l, `{"level":"info","g":`) || !strings.HasSuffix(l, `"}`) {
			t.Fatalf("broken line %q", l)
		}
		if seen[l] {
			t.Fatalf("line written twice: %q", l)
		}
		seen[l] = true
	}
}
