package cluster

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
)

// TestClusterEmptyRestartPutsSessionsBack: after a Redis restart that
// lost every key, the instances that knew the fleet's sticky sessions put
// them back with what is left of their TTL, so that an instance started
// afterwards loads them instead of binding them anew (bug: the sessions
// stayed out of Redis until each was used again past session_ttl/4, and a
// restarted instance rebound them elsewhere and moved them fleet-wide).
// The table is big enough to need more than one pipeline.
func TestClusterEmptyRestartPutsSessionsBack(t *testing.T) {
	rd := clustertest.Start(t)
	a, pa := newShareMember(t, rd, "a", instanceTTL)
	b, pb := newShareMember(t, rd, "b", instanceTTL)
	const n = 2500
	id := func(i int) string { return "u-session-s" + strconv.Itoa(i) }
	key := func(i int) string { return fmt.Sprintf("socks5://ms%d:1080", i%3) }
	for i := range n {
		m := a
		if i%2 == 1 {
			m = b
		}
		m.SessionBound(id(i), key(i), "", time.Minute)
	}
	for _, p := range []*fakePool{pa, pb} {
		waitUntil(t, 20*time.Second, "every session bound fleet-wide", func() bool {
			p.mu.Lock()
			defer p.mu.Unlock()
			return len(p.sessions) == n
		})
	}
	// Every binding reached Redis and both instances by now: what is left
	// of each one's TTL is at most a minute from here.
	known := time.Now()
	// Let the TTLs run down measurably, so that a put-back with the whole
	// session_ttl is told from one with the time left.
	time.Sleep(2 * time.Second)
	rd.Stop()
	rd.Start()
	waitUntil(t, 20*time.Second, "the sessions put back", func() bool {
		return countSessions(t, rd) == n
	})
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if got := rd.Do("GET", "rotor:sess:"+id(i)); got != key(i) {
			t.Errorf("%s put back as %q, want %q", id(i), got, key(i))
		}
	}
	pttl, err := strconv.ParseInt(strings.TrimPrefix(rd.Do("PTTL", "rotor:sess:"+id(0)), ":"), 10, 64)
	left := time.Minute - time.Since(known)
	// One second of margin: the put-back's command reaches Redis within
	// opTimeout of its TTL being worked out.
	if err != nil || pttl <= 0 || time.Duration(pttl)*time.Millisecond > left+time.Second {
		t.Errorf("put back with PTTL %d ms (%v), want at most the %v left", pttl, err, left)
	}
	// An instance started now loads them: s0 keeps its upstream.
	_, pc := newShareMember(t, rd, "c", instanceTTL)
	waitUntil(t, 10*time.Second, "c to load the sessions", func() bool {
		return pc.session(id(0)) == key(0) && pc.session(id(n-1)) == key(n-1)
	})
}

// countSessions counts the session keys Redis holds.
func countSessions(t *testing.T, rd *clustertest.Redis) int {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: rd.Addr(), MaxRetries: -1})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := 0
	iter := rdb.Scan(ctx, 0, "rotor:sess:*", 1000).Iterator()
	for iter.Next(ctx) {
		n++
	}
	if err := iter.Err(); err != nil {
		return -1
	}
	return n
}

// TestClusterSessionPutBackKeepsNewerBinding: a session put back after a
// new Redis generation does not overwrite a binding another instance
// wrote into the new Redis before the put-back (SET NX); the sessions
// nobody wrote are put back.
func TestClusterSessionPutBackKeepsNewerBinding(t *testing.T) {
	rd := clustertest.Start(t)
	a, pa, la := newLoggedMember(t, rd, "a")
	_, pb, lb := newLoggedMember(t, rd, "b")
	a.SessionBound("u-session-s1", "socks5://ms2:1080", "", time.Minute)
	a.SessionBound("u-session-s2", "socks5://flaky:1080", "", time.Minute)
	for _, p := range []*fakePool{pa, pb} {
		waitUntil(t, 5*time.Second, "both sessions bound fleet-wide", func() bool {
			return p.session("u-session-s1") != "" && p.session("u-session-s2") != ""
		})
	}
	// In one step: Redis loses every key (a new generation), and another
	// instance binds s1 anew into it, as an instance that started after
	// the restart would (its message on the session channel is not sent:
	// the put-back may start before it arrives).
	rdb := redis.NewClient(&redis.Options{Addr: rd.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	const newer = "socks5://other:1080"
	if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.FlushAll(ctx)
		p.Set(ctx, "rotor:sess:u-session-s1", newer, time.Minute)
		return nil
	}); err != nil {
		t.Fatalf("flush and bind: %v", err)
	}
	const putBack = "fleet: sessions put back into redis"
	for _, l := range []*syncBuf{la, lb} {
		waitUntil(t, 10*time.Second, "both instances to put their sessions back", func() bool {
			return strings.Contains(l.String(), putBack)
		})
	}
	if got := rd.Do("GET", "rotor:sess:u-session-s2"); got != "socks5://flaky:1080" {
		t.Errorf("s2 put back as %q", got)
	}
	if got := rd.Do("GET", "rotor:sess:u-session-s1"); got != newer {
		t.Errorf("s1 in redis is %q after the put-back, want the newer binding %q", got, newer)
	}
}

// TestNoteSessionKeepsLaterMessage: a binding another instance published
// is not undone by this instance's note of its own earlier write, taken
// after the message arrived (the put-back would otherwise restore the
// older binding).
func TestNoteSessionKeepsLaterMessage(t *testing.T) {
	c := &Cluster{known: map[string]sessKnown{}}
	now := time.Now()
	c.noteSession("s1", "socks5://new:1", now.Add(time.Minute+time.Second), true)
	c.noteSession("s1", "socks5://old:1", now.Add(time.Minute), false)
	if got := c.known["s1"].key; got != "socks5://new:1" {
		t.Errorf("known s1 = %q after the earlier write's note, want the published one", got)
	}
	// A later write (a move) replaces it; so does any message.
	c.noteSession("s1", "socks5://moved:1", now.Add(2*time.Minute), false)
	if got := c.known["s1"].key; got != "socks5://moved:1" {
		t.Errorf("known s1 = %q after a later write, want the move", got)
	}
	c.noteSession("s1", "socks5://msg:1", now.Add(time.Second), true)
	if got := c.known["s1"].key; got != "socks5://msg:1" {
		t.Errorf("known s1 = %q after a message, want it", got)
	}
}
