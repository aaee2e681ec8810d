package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health/healthtest"
)

func TestGuardDelay(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		fails int
		want  time.Duration
	}{
		{0, 0}, {1, 0}, {5, 0}, {6, 100 * ms}, {7, 200 * ms}, {8, 400 * ms}, {9, 800 * ms},
		{10, 1600 * ms}, {11, 2 * time.Second}, {12, 2 * time.Second}, {1 << 30, 2 * time.Second},
	} {
		t.Run(fmt.Sprint(tc.fails), func(t *testing.T) {
			if got := guardDelay(tc.fails); got != tc.want {
				t.Errorf("guardDelay(%d) = %v, want %v", tc.fails, got, tc.want)
			}
		})
	}
}

func TestGuardAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"127.0.0.1", "127.0.0.1"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"},
		{"2001:db8:1:2:bbbb::7", "2001:db8:1:2::/64"},
		{"fe80::1%eth0", "fe80::/64"},
		{"not-an-ip", "not-an-ip"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			if got := guardAddr(tc.in); got != tc.want {
				t.Errorf("guardAddr(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestAuthGuardCounts: the delays a sequence of failures gets, by
// address and by user, and that a quiet window forgets them.
func TestAuthGuardCounts(t *testing.T) {
	ms := time.Millisecond
	type step struct {
		advance    time.Duration
		host, user string
		want       time.Duration
	}
	same := func(n int, host, user string, want ...time.Duration) []step {
		var s []step
		for i := range n {
			s = append(s, step{host: host, user: user, want: want[i]})
		}
		return s
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one address backs off", same(8, "10.0.0.1", "", 0, 0, 0, 0, 0, 100*ms, 200*ms, 400*ms)},
		{"other addresses are not slowed", append(same(6, "10.0.0.1", "", 0, 0, 0, 0, 0, 100*ms),
			step{host: "10.0.0.2", want: 0})},
		{"one user from many addresses backs off", func() []step {
			var s []step
			for i := range 7 {
				s = append(s, step{host: fmt.Sprintf("10.0.1.%d", i), user: "scraper", want: guardDelay(i + 1)})
			}
			return s
		}()},
		{"an IPv6 /64 counts as one address", func() []step {
			var s []step
			for i := range 6 {
				s = append(s, step{host: fmt.Sprintf("2001:db8::%x", i+1), want: guardDelay(i + 1)})
			}
			return s
		}()},
		{"a quiet minute forgets", append(same(6, "10.0.0.1", "", 0, 0, 0, 0, 0, 100*ms),
			step{advance: guardWindow, host: "10.0.0.1", want: 0})},
		{"failures under a minute apart keep counting", append(same(6, "10.0.0.1", "", 0, 0, 0, 0, 0, 100*ms),
			step{advance: guardWindow - time.Second, host: "10.0.0.1", want: 200 * ms})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := healthtest.NewClock(time.Time{})
			g := newAuthGuard(clk)
			for i, s := range tc.steps {
				clk.Advance(s.advance)
				if got, _ := g.fail(s.host, s.user); got != s.want {
					t.Errorf("failure %d (%s, %q): delay %v, want %v", i+1, s.host, s.user, got, s.want)
				}
			}
		})
	}
}

// TestAuthGuardBounded: a flood of addresses keeps at most guardMaxKeys,
// and keys a minute old go.
func TestAuthGuardBounded(t *testing.T) {
	clk := healthtest.NewClock(time.Time{})
	g := newAuthGuard(clk)
	for i := range 3 * guardMaxKeys {
		g.fail(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255), "(unknown)")
		if i%1000 == 0 && g.size() > guardMaxKeys {
			t.Fatalf("%d keys after %d addresses, want at most %d", g.size(), i+1, guardMaxKeys)
		}
	}
	if n := g.size(); n > guardMaxKeys || len(g.keys) != n {
		t.Fatalf("%d keys (%d in the map), want at most %d", n, len(g.keys), guardMaxKeys)
	}
	// The shared "(unknown)" user key stayed: it failed most recently.
	if _, ok := g.keys["user (unknown)"]; !ok {
		t.Error("the key failing all along was pushed out")
	}
	clk.Advance(guardWindow)
	g.fail("192.0.2.1", "")
	if n := g.size(); n != 1 {
		t.Errorf("%d keys a minute later, want 1", n)
	}
}

// TestAuthGuardWarns: one line per key per minute, and past
// guardMaxWarns keys one summary of those held back.
func TestAuthGuardWarns(t *testing.T) {
	clk := healthtest.NewClock(time.Time{})
	g := newAuthGuard(clk)
	var lines []guardWarn
	fail := func(host, user string) {
		_, w := g.fail(host, user)
		lines = append(lines, w...)
	}
	for range 20 {
		fail("10.0.0.1", "")
	}
	if len(lines) != 1 || lines[0].key != "10.0.0.1" || lines[0].failures != guardThreshold+1 {
		t.Fatalf("20 failures from one address: lines %+v, want one for 10.0.0.1 with %d failures", lines, guardThreshold+1)
	}
	clk.Advance(guardWindow - time.Second)
	fail("10.0.0.1", "")
	if len(lines) != 1 {
		t.Fatalf("a line within the minute: %+v", lines[1:])
	}
	clk.Advance(time.Second)
	fail("10.0.0.1", "")
	if len(lines) != 2 || lines[1].failures != 16 {
		t.Fatalf("a minute later: lines %+v, want a second with the 16 failures since the first", lines)
	}

	// Many addresses: guardMaxWarns lines, then one summary.
	clk.Advance(guardWindow)
	lines = nil
	for i := range 3 * guardMaxWarns {
		for range guardThreshold + 1 {
			fail(fmt.Sprintf("10.0.2.%d", i), "")
		}
	}
	if len(lines) != guardMaxWarns {
		t.Fatalf("%d lines for %d addresses, want %d", len(lines), 3*guardMaxWarns, guardMaxWarns)
	}
	clk.Advance(guardWindow)
	fail("10.0.3.1", "")
	if len(lines) != guardMaxWarns+1 || lines[guardMaxWarns].held != 2*guardMaxWarns {
		t.Fatalf("after the minute: %+v, want a summary of %d clients", lines[guardMaxWarns:], 2*guardMaxWarns)
	}
	if got, want := lines[guardMaxWarns].failures, 2*guardMaxWarns*(guardThreshold+1); got != want {
		t.Errorf("summary counts %d failures, want %d", got, want)
	}
}
