package health

import (
	"io"
	"net"
	"strings"
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
