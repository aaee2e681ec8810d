package cluster

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// newMember returns a started cluster member named inst over a fresh
// tracker holding the record "k"; t.Cleanup closes it.
func newMember(t *testing.T, rd *clustertest.Redis, inst string, cfg Config) (*Cluster, *health.Tracker) {
	t.Helper()
	tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	cfg.Redis, cfg.Instance = rd.URL(), inst
	c, err := New(cfg, tr, zerolog.Nop())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tr.SetFleet(c, c, c.RetryInterval())
	tr.Add("k", "up", nil, false)
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	waitUntil(t, 5*time.Second, inst+" connected", c.Connected)
	return c, tr
}

// waitUntil polls cond (state crosses Redis: no local event to wait on).
func waitUntil(t *testing.T, bound time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestClusterLeaseExpiresWhenOwnerDies(t *testing.T) {
	rd := clustertest.Start(t)
	cfg := Config{LeaseTTL: 600 * time.Millisecond}
	a, _ := newMember(t, rd, "a", cfg)
	b, _ := newMember(t, rd, "b", cfg)

	release, ok := a.TryProbe("k")
	if !ok {
		t.Fatal("a: first TryProbe refused")
	}
	if _, ok := b.TryProbe("k"); ok {
		t.Fatal("b got the lease a holds")
	}
	// Renewal keeps it beyond its TTL while a lives.
	time.Sleep(2 * cfg.LeaseTTL)
	if _, ok := b.TryProbe("k"); ok {
		t.Fatal("b got a's lease while a renews it")
	}
	// a dies without releasing (Close does not release).
	_ = a.Close()
	start := time.Now()
	waitUntil(t, 3*time.Second, "b to take the lease over", func() bool {
		rel, ok := b.TryProbe("k")
		if ok {
			rel()
		}
		return ok
	})
	if took := time.Since(start); took > cfg.LeaseTTL+500*time.Millisecond {
		t.Errorf("takeover after %v, lease TTL %v", took, cfg.LeaseTTL)
	}
	release() // a's late release must not delete b's lease (compare-and-delete)
	if got := rd.Do("GET", "rotor:lease:k"); got != "" && !strings.HasPrefix(got, "b/") {
		t.Errorf("lease after a's late release: %q", got)
	}
}

func TestClusterReleaseAfterOutcomeIsShared(t *testing.T) {
	rd := clustertest.Start(t)
	a, _ := newMember(t, rd, "a", Config{})
	b, trB := newMember(t, rd, "b", Config{})

	release, ok := a.TryProbe("k")
	if !ok {
		t.Fatal("a: TryProbe refused")
	}
	// a's probe passed: the outcome is queued, then the lease released.
	a.Publish(health.RemoteState{Key: "k", State: health.Eligible, From: health.ProbeAllowed,
		Stage: health.StageProbe, Detail: "probe passed", At: time.Now()})
	release()
	waitUntil(t, 3*time.Second, "lease released", func() bool { return rd.Do("GET", "rotor:lease:k") == "" })
	// b now takes the lease, sees the shared eligible, and does not probe.
	if _, ok := b.TryProbe("k"); ok {
		t.Fatal("b was told to probe although the shared record is eligible")
	}
	if rd.Do("GET", "rotor:lease:k") != "" {
		t.Error("b kept the lease of a needless probe")
	}
	if got := trB.Snapshot(trB.Lookup("k")).State; got != health.Eligible {
		t.Errorf("b: state %v, want eligible", got)
	}
}

func TestClusterConcurrentWritesConverge(t *testing.T) {
	rd := clustertest.Start(t)
	cfg := Config{History: 8}
	a, trA := newMember(t, rd, "a", cfg)
	b, trB := newMember(t, rd, "b", cfg)

	base := time.Now()
	var wg sync.WaitGroup
	const n = 40
	for i := range n {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs := health.RemoteState{Key: "k", State: health.Cooling, Reason: health.Refused, Stage: health.StageDial,
				Detail: fmt.Sprintf("w%d", i), At: base.Add(time.Duration(i) * time.Millisecond),
				Until: base.Add(time.Minute + time.Duration(i)*time.Millisecond), Streak: i}
			if err := c.write(rs); err != nil {
				t.Errorf("write %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	rec, err := decodeRecord(rd.Do("GET", "rotor:rec:k"))
	if err != nil {
		t.Fatal(err)
	}
	// Every write counted, none lost: the newest transition (by time) is
	// the state, the history holds the newest 8 in order.
	if rec.V != n {
		t.Errorf("version %d, want %d", rec.V, n)
	}
	if rec.Detail != fmt.Sprintf("w%d", n-1) || rec.Inst != "b" {
		t.Errorf("record state from %q by %s, want w%d by b", rec.Detail, rec.Inst, n-1)
	}
	if len(rec.Hist) != 8 || rec.Hist[7].Detail != fmt.Sprintf("w%d", n-1) || rec.Hist[0].Detail != fmt.Sprintf("w%d", n-8) {
		t.Errorf("history %+v", rec.Hist)
	}
	// Both trackers converge on that record (a lost some writes to b's
	// newer ones and applied them; the subscription carries the rest).
	want := base.Add(time.Minute + (n-1)*time.Millisecond).Truncate(time.Millisecond)
	// (b wrote the winner itself, through write() rather than its
	// tracker, so only a has something to converge.)
	_ = trB
	waitUntil(t, 3*time.Second, "a converges on b's newest write", func() bool {
		s := trA.Snapshot(trA.Lookup("k"))
		return s.State == health.Cooling && s.Until.Equal(want)
	})
}

func TestClusterRedisDownProbesLocally(t *testing.T) {
	rd := clustertest.Start(t)
	rd.Stop()
	tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	c, err := New(Config{Redis: rd.URL(), Instance: "a"}, tr, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	tr.SetFleet(c, c, c.RetryInterval())
	r := tr.Add("k", "up", nil, false)
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	waitUntil(t, 5*time.Second, "the outage noticed", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.down
	})
	if rel, ok := c.TryProbe("k"); !ok || rel == nil {
		t.Fatal("Redis down: TryProbe must let the instance probe locally")
	}
	// A local transition during the outage is kept and pushed on return.
	tr.Disable(r, "maintenance")
	rd.Start()
	waitUntil(t, 5*time.Second, "reconnect", c.Connected)
	waitUntil(t, 5*time.Second, "outage transition pushed", func() bool {
		return strings.Contains(rd.Do("GET", "rotor:rec:k"), `"state":"disabled"`)
	})
}

func TestClusterConfigDefaults(t *testing.T) {
	c := Config{Redis: "redis://127.0.0.1:6379/0"}.WithDefaults()
	if c.Instance == "" || c.Prefix != "rotor" || c.LeaseTTL != DefaultLeaseTTL || c.History != DefaultHistory {
		t.Errorf("defaults %+v", c)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
	if err := (Config{Instance: "a"}).Validate(); err == nil {
		t.Error("instance without redis accepted")
	}
	if err := (Config{Redis: "redis://:pw@h:1", LeaseTTL: time.Millisecond}).Validate(); err == nil {
		t.Error("1ms lease accepted")
	}
}

// TestClusterConfigValidateReportsEvery: every invalid [cluster] field is
// its own error naming its key, also when redis is missing (bug: one
// "; "-joined string, and nothing past a missing redis).
func TestClusterConfigValidateReportsEvery(t *testing.T) {
	err := Config{Instance: "a b", LeaseTTL: time.Millisecond, Resync: -1, MaxClockSkew: -1, History: -1}.Validate()
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("err %T is not joined: %v", err, err)
	}
	var got []string
	for _, e := range j.Unwrap() {
		var ke *KeyError
		if !errors.As(e, &ke) {
			t.Fatalf("%v is not a *KeyError", e)
		}
		got = append(got, ke.Key)
	}
	want := []string{"cluster.redis", "cluster.instance", "cluster.lease_ttl", "cluster.max_clock_skew", "cluster.resync", "cluster.history"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("keys %v, want %v", got, want)
	}
}
