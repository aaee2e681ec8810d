package cluster

import (
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// fakePool records what the cluster hands to the pool.
type fakePool struct {
	mu        sync.Mutex
	instances int
	sessions  map[string]string // id → key
	fills     int
	refreshes int // RefreshSessions calls
}

func (p *fakePool) SetInstances(n int) {
	p.mu.Lock()
	p.instances = n
	p.mu.Unlock()
}

func (p *fakePool) ApplySession(id, key string, left time.Duration, fill bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fill {
		p.fills++
		if _, ok := p.sessions[id]; ok {
			return
		}
	}
	p.sessions[id] = key
}

func (p *fakePool) RefreshSessions() {
	p.mu.Lock()
	p.refreshes++
	p.mu.Unlock()
}

func (p *fakePool) n() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.instances
}

func (p *fakePool) session(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sessions[id]
}

// newShareMember is newMember with a fake pool and instance TTL ttl.
func newShareMember(t *testing.T, rd *clustertest.Redis, inst string, ttl time.Duration) (*Cluster, *fakePool) {
	t.Helper()
	tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	c, err := New(Config{Redis: rd.URL(), Instance: inst}, tr, zerolog.Nop())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p := &fakePool{sessions: map[string]string{}}
	c.SetPool(p)
	c.instTTL = ttl
	tr.SetFleet(c, c, c.RetryInterval())
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	waitUntil(t, 5*time.Second, inst+" connected", c.Connected)
	return c, p
}

func TestClusterInstancesCounted(t *testing.T) {
	rd := clustertest.Start(t)
	a, pa := newShareMember(t, rd, "a", 2*time.Second)
	b, pb := newShareMember(t, rd, "b", 2*time.Second)
	c, _ := newShareMember(t, rd, "c", 2*time.Second)
	for _, p := range []*fakePool{pa, pb} {
		waitUntil(t, 5*time.Second, "3 instances counted", func() bool { return p.n() == 3 })
	}
	// A clean shutdown leaves the set at once (a believes a lower count
	// once the instance TTL since its own start has passed).
	_ = c.Close()
	waitUntil(t, 5*time.Second, "a to count 2 after c left", func() bool { return pa.n() == 2 && a.Instances() == 2 })
	// A dead instance (no leave) drops out after the instance TTL: b stops
	// heartbeating without removing itself.
	b.cancel()
	b.wg.Wait()
	start := time.Now()
	waitUntil(t, 8*time.Second, "a to count 1 after b died", func() bool { return pa.n() == 1 })
	if took := time.Since(start); took > 2*time.Second+3*time.Second {
		t.Errorf("dead instance counted for %v, TTL 2s", took)
	}
	if got := rd.Do("ZCARD", "rotor:instances"); got != ":1" {
		t.Errorf("ZCARD rotor:instances = %s, want 1", got)
	}
}

func TestClusterSessionsShared(t *testing.T) {
	rd := clustertest.Start(t)
	a, _ := newShareMember(t, rd, "a", instanceTTL)
	_, pb := newShareMember(t, rd, "b", instanceTTL)
	a.SessionBound("s1", "socks5://u1:1", "", time.Minute)
	waitUntil(t, 3*time.Second, "b to learn s1", func() bool { return pb.session("s1") == "socks5://u1:1" })
	if got := rd.Do("GET", "rotor:sess:s1"); got != "socks5://u1:1" {
		t.Errorf("stored session %q", got)
	}
	if pttl := rd.Do("PTTL", "rotor:sess:s1"); pttl == ":-1" || pttl == ":-2" {
		t.Errorf("stored session has no TTL (%s)", pttl)
	}
	// A member started later loads the stored sessions (fill only).
	_, pc := newShareMember(t, rd, "c", instanceTTL)
	waitUntil(t, 3*time.Second, "c to load s1", func() bool { return pc.session("s1") == "socks5://u1:1" })
	pc.mu.Lock()
	fills := pc.fills
	pc.mu.Unlock()
	if fills == 0 {
		t.Error("c learnt s1 without a fill load")
	}
}

// TestClusterStaleRefreshKeepsMove: a refresh of a session's old binding
// that reaches Redis after another instance moved the session leaves the
// move in place, and the refreshing instance learns of the move. Bug: the
// refresh was a plain SET, so a late refresh (or a late answer on the old
// upstream) undid the move fleet-wide.
func TestClusterStaleRefreshKeepsMove(t *testing.T) {
	rd := clustertest.Start(t)
	a, pa := newShareMember(t, rd, "a", instanceTTL)
	b, pb := newShareMember(t, rd, "b", instanceTTL)
	const id, old, moved = "u-session-m", "socks5://old:1", "socks5://new:1"
	a.SessionBound(id, old, "", time.Minute)
	waitUntil(t, 5*time.Second, "b to learn the binding", func() bool { return pb.session(id) == old })
	b.SessionBound(id, moved, old, time.Minute) // b moves it: old failed there
	waitUntil(t, 5*time.Second, "the move stored", func() bool { return rd.Do("GET", "rotor:sess:"+id) == moved })
	a.SessionBound(id, old, old, time.Minute) // a's late refresh of the old binding
	// A later binding of a's, in a later batch, shows that the refresh's
	// batch has been written.
	waitUntil(t, 5*time.Second, "a's queue taken", func() bool {
		a.sessMu.Lock()
		defer a.sessMu.Unlock()
		return len(a.sessPending) == 0
	})
	a.SessionBound("u-session-barrier", old, "", time.Minute)
	waitUntil(t, 5*time.Second, "the barrier stored", func() bool { return rd.Do("GET", "rotor:sess:u-session-barrier") == old })
	if got := rd.Do("GET", "rotor:sess:"+id); got != moved {
		t.Errorf("after a's late refresh Redis holds %q, want the move's %q", got, moved)
	}
	waitUntil(t, 5*time.Second, "a to hold the move", func() bool { return pa.session(id) == moved })
	if got := pb.session(id); got != moved {
		t.Errorf("b holds %q, want the move's %q", got, moved)
	}
}

// TestClusterRefreshesHeldSessions: the sync loop asks the pool for the
// sessions it holds every second (Pool.RefreshSessions), so that a
// session in use here does not expire in the fleet.
func TestClusterRefreshesHeldSessions(t *testing.T) {
	rd := clustertest.Start(t)
	_, pa := newShareMember(t, rd, "a", instanceTTL)
	waitUntil(t, 5*time.Second, "a refresh asked for", func() bool {
		pa.mu.Lock()
		defer pa.mu.Unlock()
		return pa.refreshes > 0
	})
}

// TestClusterQueuedMovesKeepTheirBase: two moves of a session queued
// before a flush are written as one move from the binding Redis holds.
// (Keeping the second's from, the first's target that Redis never held,
// would read as another instance's move and undo both.)
func TestClusterQueuedMovesKeepTheirBase(t *testing.T) {
	c := &Cluster{sessPending: map[string]sessBind{}, kick: make(chan struct{}, 1)}
	c.SessionBound("s", "socks5://b:1", "socks5://a:1", time.Minute)
	c.SessionBound("s", "socks5://c:1", "socks5://b:1", time.Minute)
	c.SessionBound("s", "socks5://c:1", "socks5://c:1", time.Minute) // and a refresh
	if b := c.sessPending["s"]; b.Key != "socks5://c:1" || b.From != "socks5://a:1" {
		t.Errorf("queued %+v, want socks5://c:1 from socks5://a:1", b)
	}
}
