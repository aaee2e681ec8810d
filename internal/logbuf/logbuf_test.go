package logbuf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
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

func (s *sink) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// closeW closes w at the test's end (in a synctest bubble: before it
// ends, as the writer goroutine must have exited).
func closeW(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// Info lines are held for Delay and written as one batch (issue #8).
func TestInfoLinesAreBatched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{}
		w := New(s, Config{Delay: 50 * time.Millisecond})
		defer closeW(t, w)
		log := zerolog.New(w)
		for i := 0; i < 10; i++ {
			log.Info().Int("i", i).Msg("tunnel")
		}
		synctest.Wait()
		if n := s.count(); n != 0 {
			t.Fatalf("%d writes before the delay, want 0 (lines are held)", n)
		}
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		if n := s.count(); n != 1 {
			t.Fatalf("%d writes for 10 lines after the delay, want 1 batch", n)
		}
		for i := 0; i < 10; i++ {
			if !strings.Contains(s.all(), fmt.Sprintf(`"i":%d,`, i)) {
				t.Fatalf("line %d missing from %q", i, s.all())
			}
		}
		if got := strings.Count(s.all(), "\n"); got != 10 {
			t.Fatalf("%d lines written, want 10", got)
		}
	})
}

// A warning wakes the writer at once (no time passes in the bubble) and
// goes out with everything held before it, in order.
func TestWarningsAreWrittenAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{}
		w := New(s, Config{Delay: time.Hour})
		defer closeW(t, w)
		log := zerolog.New(w)
		start := time.Now()
		log.Info().Msg("first")
		log.Debug().Msg("second")
		log.Warn().Msg("third")
		synctest.Wait()
		got := s.all()
		if s.count() != 1 || got != `{"level":"info","message":"first"}`+"\n"+`{"level":"debug","message":"second"}`+"\n"+`{"level":"warn","message":"third"}`+"\n" {
			t.Fatalf("after a warning: %d writes %q, want one write with first, second, third in order", s.count(), got)
		}
		log.Error().Msg("alone")
		synctest.Wait()
		if s.count() != 2 || s.writes[1] != `{"level":"error","message":"alone"}`+"\n" {
			t.Fatalf("an error with nothing held: writes %q", s.writes)
		}
		if d := time.Since(start); d != 0 {
			t.Errorf("the warnings waited %v", d)
		}
	})
}

func TestFullBatchIsWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{}
		w := New(s, Config{Delay: time.Hour})
		defer closeW(t, w)
		line := append(bytes.Repeat([]byte("x"), 1023), '\n')
		for i := 0; i < flushSize/len(line); i++ {
			if _, err := w.Write(line); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if s.count() != 1 || len(s.all()) != flushSize {
			t.Fatalf("after %d bytes: %d writes of %d bytes, want one of %d", flushSize, s.count(), len(s.all()), flushSize)
		}
	})
}

func TestCloseWritesHeldLinesThenWritesDirectly(t *testing.T) {
	s := &sink{}
	w := New(s, Config{Delay: time.Hour})
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
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A failed write loses its lines, counted, and never fails the caller
// (zerolog would print the error to os.Stderr itself); the next batch
// that gets out ends with the notice.
func TestWriteErrorsAreCountedAsDrops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{err: errors.New("broken pipe")}
		w := New(s, Config{Delay: time.Hour})
		defer closeW(t, w)
		for _, l := range []string{"a\n", "b\n"} {
			if _, err := w.Write([]byte(l)); err != nil {
				t.Fatalf("Write: %v", err)
			}
		}
		if _, err := w.WriteLevel(zerolog.WarnLevel, []byte("w\n")); err != nil {
			t.Fatalf("WriteLevel: %v", err)
		}
		synctest.Wait()
		if got := w.Dropped(); got != 3 {
			t.Fatalf("Dropped = %d after a failed write of 3 lines, want 3", got)
		}
		s.fail(nil)
		_, _ = w.WriteLevel(zerolog.ErrorLevel, []byte("resumed\n"))
		synctest.Wait()
		got := s.all()
		if !strings.HasPrefix(got, "resumed\n") || !strings.Contains(got, `"message":"3 log lines dropped: stderr was not being read"`) {
			t.Fatalf("after writes resume: %q, want the line, then the notice of 3", got)
		}
	})
}

func TestNoticeJSON(t *testing.T) {
	var line struct {
		Level, Message, Time string
		Dropped              uint64
	}
	b := NoticeJSON(42)
	if err := json.Unmarshal(b, &line); err != nil || !bytes.HasSuffix(b, []byte("\n")) {
		t.Fatalf("notice %q: %v", b, err)
	}
	if line.Level != "warn" || line.Dropped != 42 || line.Message != "42 log lines dropped: stderr was not being read" || line.Time == "" {
		t.Fatalf("notice %+v", line)
	}
}

// Concurrent loggers never interleave inside a line, and every line is
// written once.
func TestConcurrentLinesStayWhole(t *testing.T) {
	s := &sink{}
	w := New(s, Config{Delay: time.Millisecond})
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
