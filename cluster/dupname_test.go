package cluster

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
)

// syncBuf collects log output across goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newLoggedMember is newShareMember with its log captured.
func newLoggedMember(t *testing.T, rd *clustertest.Redis, inst string) (*Cluster, *fakePool, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	tr := health.NewTracker(health.Config{StartEligible: true}, nil, zerolog.Nop())
	c, err := New(Config{Redis: rd.URL(), Instance: inst}, tr, zerolog.New(logs))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	p := &fakePool{sessions: map[string]string{}}
	c.SetPool(p)
	tr.SetFleet(c, c, c.RetryInterval())
	c.Start()
	t.Cleanup(func() { _ = c.Close() })
	waitUntil(t, 5*time.Second, inst+" connected", c.Connected)
	return c, p, logs
}

const dupMsg = "another rotor process heartbeats under this instance name"

func TestClusterDuplicateInstanceName(t *testing.T) {
	rd := clustertest.Start(t)
	_, p1, logs1 := newLoggedMember(t, rd, "a")
	_, p2, logs2 := newLoggedMember(t, rd, "a")
	// Both processes hold a share: each is counted.
	for _, p := range []*fakePool{p1, p2} {
		waitUntil(t, 5*time.Second, "2 processes counted", func() bool { return p.n() == 2 })
	}
	// Both say so, clearly.
	for i, l := range []*syncBuf{logs1, logs2} {
		waitUntil(t, 5*time.Second, "the duplicate name warned about", func() bool { return strings.Contains(l.String(), dupMsg) })
		if out := l.String(); !strings.Contains(out, `"level":"warn"`) || !strings.Contains(out, `"instance":"a"`) {
			t.Errorf("process %d: warning %s", i+1, out)
		}
	}
}

func TestClusterRestartUnderSameNameIsNoDuplicate(t *testing.T) {
	rd := clustertest.Start(t)
	old, _, _ := newLoggedMember(t, rd, "a")
	// The old process dies without leaving (its member stays up to the
	// instance TTL), and a new one takes its name at once.
	old.cancel()
	old.wg.Wait()
	_, _, logs := newLoggedMember(t, rd, "a")
	time.Sleep(2500 * time.Millisecond) // a live duplicate is seen within a heartbeat or two
	if strings.Contains(logs.String(), dupMsg) {
		t.Errorf("a crashed predecessor was taken for a live duplicate: %s", logs.String())
	}
}
