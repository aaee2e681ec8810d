package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rs/zerolog"
)

// Loop tests run inside synctest bubbles: the tracker uses the real clock,
// which the bubble fakes, and upstreams are net.Pipe fakes, so time only
// moves when every goroutine is durably blocked (STYLE 47).

// startRun runs tr.Run until the test ends and checks it returned nil.
func startRun(t *testing.T, tr *Tracker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tr.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func syncCfg() Config {
	return Config{Probe: ProbeConfig{URL: testProbeURL}, Cooldown: CooldownConfig{Jitter: -1}}
}

func TestRunDiesAndComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.StartEligible = true
		tr := NewTracker(cfg, nil, zerolog.Nop())
		up := &pipeUpstream{}
		r := tr.Add("k", "up", up, false)
		startRun(t, tr)

		// The upstream dies: it still accepts, but answers 502 itself.
		up.status.Store(502)
		tr.Fail(r, &Failure{Class: UpstreamError, Stage: StageFirstByte})
		for i, cd := range []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute} {
			time.Sleep(cd - time.Millisecond)
			synctest.Wait()
			if tr.Admit(r) || tr.Eligible(r) {
				t.Fatalf("period %d: admitted while cooling", i)
			}
			if got := up.requests.Load(); got != int64(i) {
				t.Fatalf("period %d: %d probes before the deadline, want %d", i, got, i)
			}
			time.Sleep(time.Millisecond)
			synctest.Wait()
			if got := up.requests.Load(); got != int64(i+1) {
				t.Fatalf("period %d: %d probes after the deadline, want %d", i, got, i+1)
			}
		}
		// It comes back: the next probe passes and traffic flows again.
		up.status.Store(200)
		time.Sleep(8 * time.Minute)
		synctest.Wait()
		if got := up.requests.Load(); got != 5 {
			t.Errorf("probes = %d, want 5", got)
		}
		if !tr.Admit(r) {
			t.Fatal("not admitted after recovery")
		}
		s := tr.Snapshot(r)
		if s.State != Eligible || s.ProbesOK != 1 || s.ProbesFailed != 4 || s.Streak != 0 {
			t.Errorf("snapshot %+v", s)
		}
		// No further probes while eligible.
		time.Sleep(time.Hour)
		synctest.Wait()
		if got := up.requests.Load(); got != 5 {
			t.Errorf("probes while eligible: %d", got)
		}
	})
}

func TestRunHerd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.StartEligible = true
		cfg.SlowStartRate = 4
		tr := NewTracker(cfg, nil, zerolog.Nop())
		up := &pipeUpstream{}
		r := tr.Add("only", "only", up, false)
		tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
		startRun(t, tr)

		const waiters = 200
		type admit struct {
			at     time.Time
			probes int64
		}
		admits := make(chan admit, waiters)
		var wg sync.WaitGroup
		for range waiters {
			wg.Go(func() {
				for {
					ch := tr.Changed()
					if tr.Admit(r) {
						admits <- admit{time.Now(), up.requests.Load()}
						return
					}
					<-ch
				}
			})
		}
		wg.Wait()
		close(admits)

		h := tr.Snapshot(r).History
		recovered := h[len(h)-1]
		if recovered.To != Eligible {
			t.Fatalf("last transition %+v", recovered)
		}
		perSecond := map[int]int{}
		for a := range admits {
			if a.probes != 1 {
				t.Errorf("admitted after %d probes, want exactly 1", a.probes)
			}
			perSecond[int(a.at.Sub(recovered.At)/time.Second)]++
		}
		want := map[int]int{0: 4, 1: 8, 2: 16, 3: 32, 4: 64, 5: 76}
		for sec, n := range want {
			if perSecond[sec] != n {
				t.Errorf("second %d: %d admitted, want %d (all: %v)", sec, perSecond[sec], n, perSecond)
			}
		}
	})
}

func TestRunThousandRecords(t *testing.T) {
	// A short probe makes probe.rate the binding limit, a long one
	// probe.max_concurrent; both are checked in both cases.
	for _, tt := range []struct {
		name     string
		delay    time.Duration
		rateBind bool
	}{
		{"rate binds", 100 * time.Millisecond, true},
		{"concurrency binds", 4 * time.Second, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { thousandRecords(t, tt.delay, tt.rateBind) })
		})
	}
}

func thousandRecords(t *testing.T, delay time.Duration, rateBind bool) {
	cfg := syncCfg()
	cfg.StartEligible = true
	cfg.Probe.Rate = 10
	cfg.Probe.MaxConcurrent = 8
	tr := NewTracker(cfg, nil, zerolog.Nop())
	global := &inflightCounter{}
	var mu sync.Mutex
	var starts []time.Time
	const n = 1000
	ups := make([]*pipeUpstream, n)
	recs := make([]*Record, n)
	for i := range n {
		ups[i] = &pipeUpstream{global: global, delay: delay, onDial: func() {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
		}}
		recs[i] = tr.Add(fmt.Sprint("up-", i), fmt.Sprint("up-", i), ups[i], false)
	}
	startRun(t, tr)
	t0 := time.Now()
	for _, r := range recs {
		tr.Fail(r, &Failure{Class: Timeout, Stage: StageDial})
	}
	for tr.Counts()[Eligible] < n {
		<-tr.Changed()
	}
	perSecond := map[int]int{}
	busiest := 0
	for _, s := range starts {
		sec := int(s.Sub(t0) / time.Second)
		perSecond[sec]++
		busiest = max(busiest, perSecond[sec])
	}
	if busiest > 10 {
		t.Errorf("a second saw %d probe starts, rate is 10", busiest)
	}
	if rateBind && busiest != 10 {
		t.Errorf("busiest second saw %d starts; the rate should bind at 10", busiest)
	}
	if len(starts) != n {
		t.Errorf("%d probes, want %d", len(starts), n)
	}
	m := global.max.Load()
	if m > 8 || !rateBind && m != 8 {
		t.Errorf("max in flight = %d, want <= 8 (exactly 8 when concurrency binds)", m)
	}
	for i, up := range ups {
		if up.maxIn.Load() != 1 || up.requests.Load() != 1 {
			t.Fatalf("record %d: max in flight %d, probes %d", i, up.maxIn.Load(), up.requests.Load())
		}
	}
}

func TestRunStopsAndWaitsForProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(syncCfg(), nil, zerolog.Nop())
		started := make(chan struct{})
		exited := make(chan struct{})
		r := tr.Add("k", "up", funcDialer(func(ctx context.Context, _, _ string) (net.Conn, error) {
			close(started)
			defer close(exited)
			<-ctx.Done()
			return nil, ctx.Err()
		}), false)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- tr.Run(ctx) }()
		<-started
		if err := tr.Run(ctx); !errors.Is(err, ErrRunning) {
			t.Errorf("second Run = %v, want ErrRunning", err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
		select {
		case <-exited:
		default:
			t.Error("Run returned before its probe goroutine")
		}
		s := tr.Snapshot(r)
		if s.State != ProbeAllowed || s.ProbesFailed != 0 || s.Probing {
			t.Errorf("cancelled probe was applied: %+v", s)
		}
	})
}

func TestRunWithoutProbeURL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(Config{Cooldown: CooldownConfig{Jitter: -1}}, nil, zerolog.Nop())
		r := tr.Add("k", "up", nil, false)
		startRun(t, tr)
		synctest.Wait()
		if !tr.Eligible(r) {
			t.Fatalf("new record not admitted without a probe: %v", tr.Snapshot(r).State)
		}
		tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
		time.Sleep(30*time.Second - 1)
		synctest.Wait()
		if tr.Eligible(r) {
			t.Fatal("eligible before the deadline")
		}
		time.Sleep(1)
		synctest.Wait()
		s := tr.Snapshot(r)
		if s.State != Eligible || s.History[len(s.History)-1].From != Cooling {
			t.Errorf("after the deadline: %+v", s)
		}
	})
}

func TestRunObserverAndEnable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr := NewTracker(syncCfg(), nil, zerolog.Nop())
		up := &pipeUpstream{}
		r := tr.Add("k", "up", up, false)
		tr.Disable(r, "bad exit IPs") // an operator's: Enable ends it (the config's it refuses)
		obs := &recordObserver{}
		tr.SetObserver(obs)
		startRun(t, tr)
		synctest.Wait()
		if up.requests.Load() != 0 {
			t.Fatal("disabled record probed")
		}
		v := tr.Version()
		if err := tr.Enable(r); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if !tr.Eligible(r) || up.requests.Load() != 1 {
			t.Fatalf("enable: state %v probes %d", tr.Snapshot(r).State, up.requests.Load())
		}
		if tr.Version() != v+2 {
			t.Errorf("version %d → %d, want +2", v, tr.Version())
		}
		obs.mu.Lock()
		defer obs.mu.Unlock()
		if len(obs.trs) != 2 || obs.trs[0].To != ProbeAllowed || obs.trs[1].To != Eligible || len(obs.probes) != 1 || !obs.probes[0] {
			t.Errorf("observer: %+v %v", obs.trs, obs.probes)
		}
	})
}

func TestRunWakesTargetWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := syncCfg()
		cfg.StartEligible = true
		tr := NewTracker(cfg, nil, zerolog.Nop())
		r := tr.Add("k", "up", &pipeUpstream{}, false)
		startRun(t, tr)
		start := time.Now()
		tr.Fail(r, &Failure{Class: TargetHTTPError, Stage: StageHTTPStatus, Target: "shop.example"})
		var admitted time.Time
		for {
			ch := tr.Changed()
			if tr.AdmitTarget(r, "shop.example") {
				admitted = time.Now()
				break
			}
			<-ch
		}
		if got := admitted.Sub(start); got != time.Minute {
			t.Errorf("waiter admitted after %v, want exactly the 1m cooldown", got)
		}
	})
}

// TestObserverSeesTransitionsInOrder races traffic failures against an
// operator's disables and enables (and the probes they start): the log,
// the observer and the fleet must see each record's transitions in the
// order they were made, each starting where the previous one ended, so
// that the last one delivered is the state the record is in.
func TestObserverSeesTransitionsInOrder(t *testing.T) {
	cfg := syncCfg()
	cfg.StartEligible = true
	// A log writer that takes its time widens the gap between a change
	// and its delivery, as a busy stderr does.
	slow := zerolog.New(writerFunc(func(p []byte) (int, error) { time.Sleep(20 * time.Microsecond); return len(p), nil }))
	tr := NewTracker(cfg, nil, slow)
	obs := &recordObserver{}
	tr.SetObserver(obs)
	r := tr.Add("k", "up", &pipeUpstream{}, false)
	startRun(t, tr)
	var wg sync.WaitGroup
	wg.Add(2)
	stop := make(chan struct{})
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			tr.Fail(r, &Failure{Class: Refused, Stage: StageDial})
			runtime.Gosched()
		}
	}()
	go func() {
		defer wg.Done()
		defer close(stop)
		for range 60 {
			// Disable while it serves (or just cooled), then let a
			// probe bring it back.
			tr.Disable(r, "test")
			tr.Enable(r)
			for i := 0; i < 10000 && tr.Snapshot(r).State == ProbeAllowed; i++ {
				runtime.Gosched()
			}
		}
	}()
	wg.Wait()
	tr.Disable(r, "test") // ends any probe's effect: the last word
	obs.mu.Lock()
	defer obs.mu.Unlock()
	prev := Eligible
	for i, x := range obs.trs {
		if x.Target != "" {
			continue
		}
		if x.From != prev {
			t.Fatalf("transition %d of %d: %v → %v after one that ended in %v", i, len(obs.trs), x.From, x.To, prev)
		}
		prev = x.To
	}
	if st := tr.Snapshot(r).State; prev != st || len(obs.trs) < 100 {
		t.Errorf("%d transitions observed, the last ends in %v; the record is %v", len(obs.trs), prev, st)
	}
}
