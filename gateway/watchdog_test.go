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

// TestWatchdogEndDecision pins when the watchdog finds a side gone: its
// socket was closed by the kernel (a reset answering keep-alive, or
// keep-alive giving up) while no direction reads it.
func TestWatchdogEndDecision(t *testing.T) {
	quiet := tcpStats{lastRecv: time.Second, lastSent: time.Second}
	cases := []struct {
		name           string
		client, up     tcpStats
		clientDone, ud bool
		want           watchEnd
	}{
		{name: "half-closed client gone (its socket reset while nothing read it)", clientDone: true,
			client: tcpStats{lastRecv: 3 * time.Second, closed: true}, up: quiet, want: watchEnd{gone: resetClient}},
		{name: "upstream side gone after the target finished", ud: true,
			client: quiet, up: tcpStats{lastRecv: 3 * time.Second, closed: true}, want: watchEnd{gone: resetUpstream}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got watchEnd
			w := &watchdog{client: fakeStats(tc.client), up: fakeStats(tc.up),
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
