package gateway

import (
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// fakeStats is a statsReader with fixed counters.
type fakeStats tcpStats

func (f fakeStats) stats() (tcpStats, bool) { return tcpStats(f), true }

// TestWatchdogStallDecision pins when a tunnel whose response started
// counts as stalled: only once the client's last byte went up stall ago
// and nothing came back since; never while the client is still sending
// (a long upload after an early 100 Continue) or its bytes are still on
// their way up.
func TestWatchdogStallDecision(t *testing.T) {
	const stall = time.Second
	const base = 100 // upstream bytes at the tunnel's start
	cases := []struct {
		name         string
		client, up   tcpStats
		wantStalled  bool
		wantWaitedAt time.Duration
	}{
		{name: "client uploading after an early answer",
			client:       tcpStats{lastRecv: 50 * time.Millisecond},
			up:           tcpStats{rxBytes: base + 25, lastRecv: 5 * time.Second, lastSent: 40 * time.Millisecond},
			wantWaitedAt: 40 * time.Millisecond},
		{name: "upload received, still going up to a slow upstream",
			client:       tcpStats{lastRecv: 3 * time.Second},
			up:           tcpStats{rxBytes: base + 25, lastRecv: 5 * time.Second, lastSent: 30 * time.Millisecond},
			wantWaitedAt: 30 * time.Millisecond},
		{name: "upload over, nothing back for stall",
			client:      tcpStats{lastRecv: 2 * time.Second},
			up:          tcpStats{rxBytes: base + 25, lastRecv: 5 * time.Second, lastSent: 2 * time.Second},
			wantStalled: true, wantWaitedAt: 2 * time.Second},
		{name: "answer came after the upload",
			client:       tcpStats{lastRecv: 3 * time.Second},
			up:           tcpStats{rxBytes: base + 25, lastRecv: 2 * time.Second, lastSent: 3 * time.Second},
			wantWaitedAt: 3 * time.Second},
		{name: "answer in the same jiffy, a tick between the two reads",
			client:       tcpStats{lastRecv: 2 * time.Second},
			up:           tcpStats{rxBytes: base + 25, lastRecv: 2*time.Second + 4*time.Millisecond, lastSent: 2*time.Second + 4*time.Millisecond},
			wantWaitedAt: 2 * time.Second},
		{name: "no response started (first_byte's business)",
			client:       tcpStats{lastRecv: 3 * time.Second},
			up:           tcpStats{rxBytes: base, lastRecv: 5 * time.Second, lastSent: 3 * time.Second},
			wantWaitedAt: 3 * time.Second},
		{name: "retransmitting to a peer that stopped acknowledging",
			client:      tcpStats{lastRecv: 2 * time.Second},
			up:          tcpStats{rxBytes: base + 25, lastRecv: 5 * time.Second, lastSent: 200 * time.Millisecond, rto: true},
			wantStalled: true, wantWaitedAt: 2 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitingSince(tc.client, tc.up); got != tc.wantWaitedAt {
				t.Errorf("waitingSince = %v, want %v", got, tc.wantWaitedAt)
			}
			stalled := false
			w := &watchdog{client: fakeStats(tc.client), up: fakeStats(tc.up), stall: stall, tick: time.Hour,
				baseU: base, onStall: func(f *health.Failure) {
					stalled = f.Class == health.SlowBody && f.Stage == health.StageBody
				}, onEnd: func(e watchEnd) { t.Errorf("ended: %+v", e) }}
			w.timer = time.AfterFunc(time.Hour, func() {})
			t.Cleanup(w.stop)
			w.check()
			if stalled != tc.wantStalled {
				t.Errorf("stalled = %v, want %v", stalled, tc.wantStalled)
			}
			if got, ok := w.sinceSent(); !ok || got != tc.wantWaitedAt {
				t.Errorf("sinceSent = %v, %v; want %v", got, ok, tc.wantWaitedAt)
			}
		})
	}
}

// TestWatchdogEndDecision pins why the watchdog ends a tunnel: a side
// whose socket the kernel closed (a reset answering keep-alive, or
// keep-alive giving up) while no direction reads it is gone; a
// half-closed tunnel is cut after halfSilence of silence from the side
// still open; an open one after tunnel_idle_timeout of silence both ways.
func TestWatchdogEndDecision(t *testing.T) {
	const half = 10 * time.Second
	quiet := tcpStats{lastRecv: time.Second, lastSent: time.Second}
	long := tcpStats{lastRecv: 11 * time.Second, lastSent: 11 * time.Second}
	cases := []struct {
		name           string
		client, up     tcpStats
		idle           time.Duration
		clientDone, ud bool
		want           watchEnd
	}{
		{name: "half-closed client gone (its socket reset while nothing read it)", clientDone: true,
			client: tcpStats{lastRecv: 3 * time.Second, closed: true}, up: quiet, want: watchEnd{gone: resetClient}},
		{name: "upstream side gone after the target finished", ud: true,
			client: quiet, up: tcpStats{lastRecv: 3 * time.Second, closed: true}, want: watchEnd{gone: resetUpstream}},
		{name: "half-closed client, upstream side silent for the bound", clientDone: true,
			client: long, up: long, want: watchEnd{cut: cutHalfClosed, silent: half}},
		{name: "half-closed client, upstream side answered lately", clientDone: true,
			client: long, up: quiet},
		{name: "upstream side finished, client silent for the bound", ud: true,
			client: long, up: long, want: watchEnd{cut: cutHalfClosed, silent: half}},
		{name: "open tunnel silent both ways for tunnel_idle_timeout", idle: 5 * time.Second,
			client: tcpStats{lastRecv: 6 * time.Second}, up: tcpStats{lastRecv: 6 * time.Second}, want: watchEnd{cut: cutIdle, silent: 5 * time.Second}},
		{name: "open tunnel silent, no tunnel_idle_timeout", client: long, up: long},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got watchEnd
			w := &watchdog{client: fakeStats(tc.client), up: fakeStats(tc.up), idle: tc.idle, halfSilence: half,
				tick: time.Hour, clientDone: tc.clientDone, upDone: tc.ud,
				onStall: func(f *health.Failure) { t.Errorf("stall reported: %v", f) },
				onEnd:   func(e watchEnd) { got = e }}
			w.timer = time.AfterFunc(time.Hour, func() {})
			t.Cleanup(w.stop)
			w.check()
			if got != tc.want {
				t.Errorf("end = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The bound on a half-closed tunnel's silence follows tunnel_idle_timeout
// when it is set, shorter or longer than the default; "never" (0) keeps
// the default.
func TestHalfClosedSilence(t *testing.T) {
	for _, tc := range []struct{ idle, want time.Duration }{
		{0, 60 * time.Second},
		{5 * time.Second, 5 * time.Second},
		{10 * time.Minute, 10 * time.Minute},
	} {
		if got := halfClosedSilence(tc.idle); got != tc.want {
			t.Errorf("halfClosedSilence(%v) = %v, want %v", tc.idle, got, tc.want)
		}
	}
}
