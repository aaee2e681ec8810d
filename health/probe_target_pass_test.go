package health

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rs/zerolog"
)

// newLoggedTracker returns a tracker on a fake clock with no jitter whose
// log lines go to the returned buffer (probes driven synchronously: one
// writer at a time).
func newLoggedTracker(t *testing.T, cfg Config) (*Tracker, *healthtest.Clock, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	clk := healthtest.NewClock(time.Time{})
	cfg.Cooldown.Jitter = -1
	return NewTracker(cfg, clk, zerolog.New(&logs)), clk, &logs
}

// TestProbeTargetBrokenEgress: two proxies with broken egress (every
// CONNECT answered REP 4 or 5) while the good upstreams pass their probes
// to the same target. Bug: the two failures took the probe target for
// down, so the broken ones were held at the base cooldown for ever (never
// reaching permanent_after), the 503 text blamed the target and a warning
// said it seemed down. A probe passing through a third upstream says the
// target answers: lately, as it stands; long ago, once checked again
// through that upstream.
func TestProbeTargetBrokenEgress(t *testing.T) {
	tr, clk, logs := newLoggedTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL},
		Cooldown: CooldownConfig{UpstreamError: ClassPolicy{PermanentAfter: 4}}})
	good := []*pipeUpstream{{}, {}}
	for i, up := range good {
		n := []string{"good1", "good2"}[i]
		tr.Add(n, n, up, false)
	}
	drive(t, tr)
	down := new(atomic.Bool)
	down.Store(true)
	broken := []*Record{
		tr.Add("broken1", "broken1", &probeTargetDialer{down: down}, false),
		tr.Add("broken2", "broken2", &probeTargetDialer{down: down}, false),
	}
	drive(t, tr)
	for i := range 3 {
		want := tr.Policy().Cooldown(UpstreamError, i+1, 0.5)
		for _, r := range broken {
			s := tr.Snapshot(r)
			if got := s.Until.Sub(clk.Now()); s.State != Cooling || got != want || tr.Outlook(r).ProbeTargetDown {
				t.Fatalf("cooling %d: %s %v for %v (%q), want cooling for %v as its own failure", i+1, s.Name, s.State, got, s.Detail, want)
			}
		}
		clk.Advance(want)
		drive(t, tr)
	}
	for _, r := range broken {
		if s := tr.Snapshot(r); s.State != Disabled {
			t.Errorf("%s: %v (%q) after 4 failed probes, want disabled by permanent_after", s.Name, s.State, s.Detail)
		}
	}
	if strings.Contains(logs.String(), "probe target seems down") {
		t.Errorf("the probe target was blamed for two broken upstreams:\n%s", logs.String())
	}
	// The older passes were checked again through a good upstream; its
	// record is left as it was.
	if n := good[0].requests.Load() + good[1].requests.Load(); n < 3 {
		t.Errorf("%d probe requests through the good upstreams, want their own 2 and at least one check", n)
	}
	for _, n := range []string{"good1", "good2"} {
		if s := tr.Snapshot(tr.Lookup(n)); s.State != Eligible || s.ProbesOK != 1 {
			t.Errorf("%s: %v with %d passing probes, want eligible with its own one", n, s.State, s.ProbesOK)
		}
	}
}

// TestProbeTargetDownAfterPasses: the probe target goes down after every
// upstream passed its probe to it. The passes, long ago, are checked
// again through the upstream that passed last: its probe fails there too,
// so the target is taken for down and the failing upstreams stay at the
// base cooldown; the checked upstream keeps serving.
func TestProbeTargetDownAfterPasses(t *testing.T) {
	tr, clk, logs := newLoggedTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL},
		Cooldown: CooldownConfig{UpstreamError: ClassPolicy{PermanentAfter: 3}}})
	down := new(atomic.Bool)
	var recs []*Record
	for _, n := range []string{"a", "b", "c"} {
		recs = append(recs, tr.Add(n, n, &probeTargetDialer{down: down}, false))
	}
	drive(t, tr)
	clk.Advance(time.Hour)
	down.Store(true)
	tr.Fail(recs[1], &Failure{Class: Refused, Stage: StageDial})
	tr.Fail(recs[2], &Failure{Class: Refused, Stage: StageDial})
	clk.Advance(tr.Snapshot(recs[1]).Until.Sub(clk.Now()))
	base := tr.Policy().Cooldown(UpstreamError, 1, 0.5)
	for round := range 5 {
		drive(t, tr)
		s := tr.Snapshot(recs[2]) // the second to fail in a round: always paired
		if got := s.Until.Sub(clk.Now()); s.State != Cooling || got != base || !tr.Outlook(recs[2]).ProbeTargetDown {
			t.Fatalf("round %d: %s %v for %v (%q), want cooling for the base %v, the probe target seems down",
				round, s.Name, s.State, got, s.Detail, base)
		}
		clk.Advance(base)
	}
	if s := tr.Snapshot(recs[0]); s.State != Eligible {
		t.Errorf("the checked upstream is %v, want eligible: a check changes nothing of it", s.State)
	}
	if n := strings.Count(logs.String(), "probe target seems down"); n != 1 {
		t.Errorf("%d warnings that the probe target seems down, want 1:\n%s", n, logs.String())
	}
}

// TestProbeTargetReachableLine: the line saying the probe target is
// reachable again names no upstream when client traffic to its host:port
// ended the down (the upstream whose probe passed when one did). Bug: it named the
// upstream whose probe had just failed.
func TestProbeTargetReachableLine(t *testing.T) {
	tr, clk, logs := newLoggedTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL}})
	down := new(atomic.Bool)
	down.Store(true)
	a := tr.Add("a", "a", &probeTargetDialer{down: down}, false)
	tr.Add("b", "b", &probeTargetDialer{down: down}, false)
	drive(t, tr)
	if !strings.Contains(logs.String(), "probe target seems down") {
		t.Fatalf("no warning:\n%s", logs.String())
	}
	c := tr.Add("c", "c", &pipeUpstream{}, true) // disabled: never probed
	tr.SuccessTarget(c, "probe.test:80")         // client traffic reached the target
	clk.Advance(tr.Snapshot(a).Until.Sub(clk.Now()))
	drive(t, tr)
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if ev["message"] != "probe target reachable again" {
			continue
		}
		found = true
		if u, ok := ev["upstream"]; ok {
			t.Errorf("the line names upstream %v, whose probe failed (no probe passed):\n%s", u, line)
		}
	}
	if !found {
		t.Errorf("no line saying the probe target is reachable again:\n%s", logs.String())
	}
}

// silentUpstream is a healthy proxy in front of a probe target that never
// answers: each dial gives a connection (the tunnel is up) whose far end
// reads the request and then keeps silent until the probe closes it.
type silentUpstream struct {
	wg sync.WaitGroup // server goroutines
}

func (s *silentUpstream) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c1, c2 := net.Pipe()
	s.wg.Add(1)
	go func() { // owned by the test: exits when the probe closes c1
		defer s.wg.Done()
		defer c2.Close()
		br := bufio.NewReader(c2)
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		br.ReadByte() // blocks until c1 is closed
	}()
	return c1, nil
}

// TestProbeTargetSilent: a probe target that keeps every probe waiting
// past probe.timeout, through every upstream. Bug: each probe's
// "probe response: … i/o timeout" counted as the upstream's timeout
// towards permanent_after, and every upstream ended disabled, with no
// warning; a target answering 503 was covered, a silent one was not.
// Probes through two upstreams timing out at the target take it for down.
func TestProbeTargetSilent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, clk, logs := newLoggedTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL, Timeout: 2 * time.Second},
			Cooldown: CooldownConfig{Timeout: ClassPolicy{PermanentAfter: 3}}})
		up := &silentUpstream{}
		var recs []*Record
		for _, n := range []string{"a", "b", "c"} {
			recs = append(recs, tr.Add(n, n, up, false))
		}
		base := tr.Policy().Cooldown(Timeout, 1, 0.5)
		for round := range 5 {
			drive(t, tr)
			for i, r := range recs {
				s := tr.Snapshot(r)
				if s.State != Cooling {
					t.Fatalf("round %d: %s is %v (%v/%v %q), want cooling", round, s.Name, s.State, s.Reason, s.Stage, s.Detail)
				}
				if got := s.Until.Sub(clk.Now()); (round > 0 || i > 0) && (got != base || !tr.Outlook(r).ProbeTargetDown) {
					t.Errorf("round %d: %s cools for %v (%q), want the base %v: the probe target seems down", round, s.Name, got, s.Detail, base)
				}
			}
			clk.Advance(base)
		}
		if n := strings.Count(logs.String(), "probe target seems down"); n != 1 {
			t.Errorf("%d warnings that the probe target seems down, want 1:\n%s", n, logs.String())
		}
		up.wg.Wait()
	})
}

// TestProbeTargetSilentOneUpstream: one upstream whose probes time out
// while the others pass keeps its own timeouts: its cooldown grows.
func TestProbeTargetSilentOneUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tr, clk, logs := newLoggedTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL, Timeout: 2 * time.Second}})
		tr.Add("good", "good", &pipeUpstream{}, false)
		up := &silentUpstream{}
		bad := tr.Add("bad", "bad", up, false)
		drive(t, tr)
		for i := range 3 {
			want := tr.Policy().Cooldown(Timeout, i+1, 0.5)
			s := tr.Snapshot(bad)
			if got := s.Until.Sub(clk.Now()); s.State != Cooling || s.Reason != Timeout || got != want {
				t.Fatalf("cooling %d: %v/%v for %v (%q), want timeout for %v", i+1, s.State, s.Reason, got, s.Detail, want)
			}
			clk.Advance(want)
			drive(t, tr)
		}
		if strings.Contains(logs.String(), "probe target seems down") {
			t.Errorf("the probe target was blamed for one upstream's timeouts:\n%s", logs.String())
		}
		up.wg.Wait()
	})
}
