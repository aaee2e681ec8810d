package health

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// stallAfter returns a raw server that reads the probe's request, writes
// answer and then sends nothing more, holding the connection open until
// the probe closes it.
func stallAfter(answer string) func(net.Conn) {
	return func(c net.Conn) {
		c.Read(make([]byte, 512))
		io.WriteString(c, answer)
		io.Copy(io.Discard, c) // until the probe gives up and closes
	}
}

// closeAfter returns a raw server that reads the probe's request, writes
// answer and closes.
func closeAfter(answer string) func(net.Conn) {
	return func(c net.Conn) {
		c.Read(make([]byte, 512))
		io.WriteString(c, answer)
	}
}

// TestProbeReadCutByDeadline: an answer that stops part way through its
// status line or a header line is a timeout, as one that stops after a
// whole line is. Bug: "HTTP/1.1 2" and then nothing was classed
// upstream_error "malformed HTTP status code" at probe.timeout: net/http
// parses the part the deadline left it and reports that, not the
// timeout, and the class picks the cooldown table and permanent_after.
func TestProbeReadCutByDeadline(t *testing.T) {
	tests := []struct {
		name   string
		answer string
	}{
		{"status line cut", "HTTP/1.1 2"},
		{"status line without its end", "HTTP/1.1 200 OK"},
		{"header line cut", "HTTP/1.1 200 OK\r\nContent-Len"},
		{"whole lines, no blank line", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, stallAfter(tt.answer))
			err := runProbeSpec(t, ProbeConfig{URL: "http://" + addr + "/", Timeout: 200 * time.Millisecond}, &net.Dialer{})
			if err == nil {
				t.Fatal("probe passed")
			}
			if got := classifyProbe(err); got != Timeout {
				t.Errorf("class = %v (%v), want timeout", got, err)
			}
			if msg := err.Error(); !strings.Contains(msg, "timeout") || strings.Contains(msg, "malformed") {
				t.Errorf("detail %q, want the i/o timeout, not a parse error", msg)
			}
			if sign, ok := targetSign(err); !ok || sign != signSilent {
				t.Errorf("target sign = %d, %v; want the target's silence", sign, ok)
			}
		})
	}
	// Cut short by a close rather than the deadline, the part of a line
	// is still the peer's garbage.
	addr := rawServer(t, closeAfter("HTTP/1.1 2"))
	err := runProbeSpec(t, ProbeConfig{URL: "http://" + addr + "/"}, &net.Dialer{})
	if got := classifyProbe(err); err == nil || got != UpstreamError {
		t.Errorf("status line cut by a close: class %v (%v), want upstream_error", got, err)
	}
}

// TestProbeBodyRead: the probe reads the answer's body to its end, at
// most maxProbeBody of it. Bug: a 200 whose body stopped short (Content-Length
// 1000, 7 bytes and a close; or 10, 2 bytes and a stall) passed the probe
// and made the upstream eligible, and real traffic through it then failed
// slow_body at body.
func TestProbeBodyRead(t *testing.T) {
	big := strings.Repeat("x", maxProbeBody+4096)
	tests := []struct {
		name   string
		serve  func(net.Conn)
		expect string // probe.expect_body
		class  Class  // ClassNone: must pass
		sign   int    // targetSign of the failure
	}{
		{"whole body passes", closeAfter("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), "", ClassNone, 0},
		{"body to the close passes", closeAfter("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nok to the end"), "", ClassNone, 0},
		{"whole chunked body passes", closeAfter("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"), "ok", ClassNone, 0},
		{"body beyond the cap passes", stallAfter("HTTP/1.1 200 OK\r\nContent-Length: 1048576\r\n\r\n" + big), "", ClassNone, 0},
		{"body cut by a close", closeAfter("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial"), "", UpstreamError, signBadBody},
		{"chunked body cut by a close", closeAfter("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\npart"), "", UpstreamError, signBadBody},
		{"body stalls", stallAfter("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nok"), "", Timeout, signSilent},
		{"expected text in a cut body", closeAfter("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nrotor-ok"), "rotor-ok", UpstreamError, signBadBody},
		{"expected text in a stalled body", stallAfter("HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\nrotor-ok"), "rotor-ok", Timeout, signSilent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, tt.serve)
			err := runProbeSpec(t, ProbeConfig{URL: "http://" + addr + "/", ExpectBody: tt.expect, Timeout: 300 * time.Millisecond}, &net.Dialer{})
			if tt.class == ClassNone {
				if err != nil {
					t.Fatalf("probe failed: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("probe passed")
			}
			if got := classifyProbe(err); got != tt.class {
				t.Errorf("class = %v (%v), want %v", got, err, tt.class)
			}
			if !strings.HasPrefix(err.Error(), "probe body: ") {
				t.Errorf("detail %q, want it to name the body", err)
			}
			if sign, ok := targetSign(err); !ok || sign != tt.sign {
				t.Errorf("target sign = %d, %v; want %d", sign, ok, tt.sign)
			}
		})
	}
}

// cutBodyDialer is an in-process upstream (net.Pipe) whose every answer
// is a 200 with a body cut short by a close: a probe target that does so
// to every request, seen through it.
type cutBodyDialer struct{ wg *sync.WaitGroup }

func (d cutBodyDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c1, c2 := net.Pipe()
	d.wg.Add(1)
	go func() { // owned by the test: exits when the answer is written or c1 closes
		defer d.wg.Done()
		defer c2.Close()
		if _, err := http.ReadRequest(bufio.NewReader(c2)); err == nil {
			io.WriteString(c2, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\npartial")
		}
	}()
	return c1, nil
}

// TestProbeTargetBodyCut: a probe target that cuts every body short is
// taken for down, as one answering a wrong status to every probe is:
// cooldowns stay at base rather than growing towards permanent_after for
// every upstream.
func TestProbeTargetBodyCut(t *testing.T) {
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	tr, clk := newFakeTracker(t, Config{Probe: ProbeConfig{URL: testProbeURL},
		Cooldown: CooldownConfig{Jitter: -1, UpstreamError: ClassPolicy{PermanentAfter: 3}}})
	recs := []*Record{tr.Add("a", "a", cutBodyDialer{&wg}, false), tr.Add("b", "b", cutBodyDialer{&wg}, false)}
	base := tr.Policy().Cooldown(UpstreamError, 1, 0.5)
	for round := range 4 {
		drive(t, tr)
		for i, r := range recs {
			s := tr.Snapshot(r)
			if s.State != Cooling || s.Reason != UpstreamError {
				t.Fatalf("round %d: %s is %v/%v (%q), want cooling upstream_error", round, s.Name, s.State, s.Reason, s.Detail)
			}
			if got := s.Until.Sub(clk.Now()); got != base {
				t.Errorf("round %d: %s cools for %v, want the base %v", round, s.Name, got, base)
			}
			if (round > 0 || i > 0) && !strings.HasPrefix(s.Detail, "probe target seems down: probe body: cut short") {
				t.Errorf("round %d: %s detail %q", round, s.Name, s.Detail)
			}
		}
		clk.Advance(base)
	}
}
