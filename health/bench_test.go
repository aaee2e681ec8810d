package health

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

func BenchmarkAdmitEligible(b *testing.B) {
	tr := NewTracker(Config{StartEligible: true}, nil, zerolog.Nop())
	r := tr.Add("k", "up", nil, false)
	for b.Loop() {
		if !tr.Admit(r) {
			b.Fatal("refused")
		}
	}
}

func BenchmarkAdmitParallel(b *testing.B) {
	tr := NewTracker(Config{StartEligible: true}, nil, zerolog.Nop())
	r := tr.Add("k", "up", nil, false)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if !tr.AdmitTarget(r, "example.com") {
				b.Error("refused")
				return
			}
		}
	})
}

// fixedClock costs nothing to read: the clock=fixed variants show the
// tracker's own cost, apart from time.Now (whose cost depends on the host's
// clocksource; it is slow on kvm-clock VMs).
type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                       { return c.t }
func (c fixedClock) After(time.Duration) <-chan time.Time { return nil }

func benchClocks(b *testing.B, f func(b *testing.B, clk Clock)) {
	b.Run("clock=real", func(b *testing.B) { f(b, nil) })
	b.Run("clock=fixed", func(b *testing.B) { f(b, fixedClock{time.Now()}) })
}

func BenchmarkSuccessParallel(b *testing.B) {
	benchClocks(b, func(b *testing.B, clk Clock) {
		tr := NewTracker(Config{StartEligible: true}, clk, zerolog.Nop())
		r := tr.Add("k", "up", nil, false)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tr.Success(r)
			}
		})
	})
}

func BenchmarkSuccessTargetParallel(b *testing.B) {
	tr := NewTracker(Config{StartEligible: true}, nil, zerolog.Nop())
	r := tr.Add("k", "up", nil, false)
	hosts := []string{"a.example", "b.example", "c.example", "d.example"}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tr.SuccessTarget(r, hosts[i%len(hosts)])
			i++
		}
	})
}

// BenchmarkFailParallel reports failures that do not cool (after is huge),
// i.e. the locked counting path every failure takes.
func BenchmarkFailParallel(b *testing.B) {
	benchClocks(b, func(b *testing.B, clk Clock) {
		tr := NewTracker(Config{StartEligible: true, Cooldown: CooldownConfig{Timeout: ClassPolicy{After: 1 << 30}}}, clk, zerolog.Nop())
		r := tr.Add("k", "up", nil, false)
		f := &Failure{Class: Timeout, Stage: StageFirstByte}
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				tr.Fail(r, f)
			}
		})
	})
}

// BenchmarkMixedParallel is the reporting mix of a busy pool: admits,
// successes and occasional failures on a few records.
func BenchmarkMixedParallel(b *testing.B) {
	tr := NewTracker(Config{StartEligible: true, Cooldown: CooldownConfig{Timeout: ClassPolicy{After: 1 << 30}}}, nil, zerolog.Nop())
	recs := []*Record{tr.Add("a", "a", nil, false), tr.Add("b", "b", nil, false), tr.Add("c", "c", nil, false)}
	f := &Failure{Class: Timeout, Stage: StageFirstByte}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			r := recs[i%len(recs)]
			tr.Admit(r)
			if i%16 == 0 {
				tr.Fail(r, f)
			} else {
				tr.Success(r)
			}
			i++
		}
	})
}

func TestLogTransitions(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	w := zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}))
	tr, _ := newFakeTracker(t, Config{StartEligible: true})
	tr.log = zerolog.New(w)
	const canary = "canary-s3cret-pw"
	// The dialer holds credentials; health must never log it.
	d := &secretDialer{Password: canary, Dialer: funcDialer(func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("dial failed")
	})}
	r := tr.Add("socks5://user@10.0.0.1:1080", "dc-1", d, false)
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial, Err: errors.New("connection refused")})
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial, Err: errors.New("late")}) // counted, not logged
	tr.Disable(r, "by operator")
	tr.Remove(r.Key())
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Adding logs nothing here: the gateway logs what a config load added.
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3 (cooled, disabled, removed):\n%s", len(lines), out)
	}
	for _, want := range []string{
		`"upstream":"dc-1"`, `"from":"eligible"`, `"to":"cooling"`, `"class":"refused"`,
		`"stage":"dial"`, `"until":"2026-01-01T00:00:30Z"`, `"error":"connection refused"`, `"level":"info"`,
	} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("cooling line lacks %s: %s", want, lines[0])
		}
	}
	if !strings.Contains(lines[2], `"stage":"operator"`) || strings.Contains(lines[2], `"class"`) || !strings.Contains(lines[2], "removed") {
		t.Errorf("remove line: %s", lines[2])
	}
	if strings.Contains(out, canary) {
		t.Error("log output contains the canary password")
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

type secretDialer struct {
	Dialer
	Password string
}
