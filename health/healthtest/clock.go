// Package healthtest provides test helpers for package health: a fake
// clock whose timers fire only when the test advances it.
//
// The fake clock suits tests of state (Fail, Admit, Snapshot, Restore)
// that do not run the prober. To test health.Tracker.Run, prefer a
// testing/synctest bubble with the real clock (nil) and net.Pipe upstreams:
// with this clock a test cannot tell whether Run has armed its timer
// before the test calls Advance.
package healthtest

import (
	"sync"
	"time"
)

// Clock is a fake health.Clock. Now starts at the given instant and moves
// only through Advance; After channels fire during Advance (or at once for
// d <= 0). Safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	// mu guards the fields below.
	now    time.Time
	timers []timer
}

type timer struct {
	at time.Time
	ch chan time.Time
}

// NewClock returns a clock reading start. A zero start means
// 2026-01-01T00:00:00Z.
func NewClock(start time.Time) *Clock {
	if start.IsZero() {
		start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return &Clock{now: start}
}

// Now returns the current fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives the fake time once the clock has
// advanced by d.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, timer{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires every timer now due.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	keep := c.timers[:0]
	for _, t := range c.timers {
		if t.at.After(c.now) {
			keep = append(keep, t)
			continue
		}
		t.ch <- c.now
	}
	clear(c.timers[len(keep):])
	c.timers = keep
}

// Timers returns the number of pending After timers.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}
