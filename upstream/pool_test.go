package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/health/healthtest"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// syncBuffer collects log output for assertions.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testPool is a pool whose endpoints start eligible and are never dialled
// unless a test does so; clock may be nil (real time).
type testPool struct {
	*Pool
	tr   *health.Tracker
	logs *syncBuffer
}

func newTestPool(t testing.TB, cfg PoolConfig, clock health.Clock, specs ...Spec) *testPool {
	t.Helper()
	logs := &syncBuffer{}
	log := zerolog.New(logs)
	if _, ok := t.(*testing.B); ok {
		log = zerolog.Nop()
	}
	tr := health.NewTracker(health.Config{StartEligible: true, SlowStart: -1, ScopeTargetHTTPError: health.ScopeTarget}, clock, zerolog.Nop())
	p, err := NewPool(cfg, DialConfig{AllowPrivate: true}, tr, clock, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := p.Update(specs); err != nil {
		t.Fatal(err)
	}
	return &testPool{Pool: p, tr: tr, logs: logs}
}

// spec is an upstream at 127.0.0.1:port named n (no dialing happens in
// pick, so the port need not listen).
func spec(n string, port int) Spec {
	return Spec{Name: n, URL: &url.URL{Scheme: "socks5", Host: fmt.Sprintf("127.0.0.1:%d", port)}}
}

func specs(names ...string) []Spec {
	out := make([]Spec, len(names))
	for i, n := range names {
		out[i] = spec(n, 10000+i)
	}
	return out
}

// use runs one successful attempt for req and releases it at once, like a
// short tunnel; it returns the endpoint's name ("" when none was eligible
// within the wait).
func (tp *testPool) use(t testing.TB, req Request) string {
	t.Helper()
	a := tp.NewAttempts(req)
	e, err := a.Next(context.Background())
	if err != nil {
		if errors.Is(err, ErrNoEligible) {
			return ""
		}
		t.Fatalf("Next: %v", err)
	}
	a.Succeeded(e)
	a.Release(e)
	return e.Name
}

func (tp *testPool) disable(t testing.TB, name string) {
	t.Helper()
	tp.tr.Disable(tp.Lookup(name).Record(), "test")
}

func TestSessionStickyAndRehomed(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond, SessionTTL: time.Hour}, clock, specs("a", "b", "c")...)
	s1 := Request{Addr: "example.com:443", Session: "s1"}
	home := tp.use(t, s1)
	for i := 0; i < 10; i++ {
		tp.use(t, Request{Addr: "example.com:443"}) // moves the round-robin cursor
		if got := tp.use(t, s1); got != home {
			t.Fatalf("use %d: session went to %s, want %s", i, got, home)
		}
	}

	// The home cools: the session moves, logs the move, and stays.
	tp.disable(t, home)
	moved := tp.use(t, s1)
	if moved == "" || moved == home {
		t.Fatalf("after %s was disabled the session went to %q", home, moved)
	}
	for i := 0; i < 5; i++ {
		if got := tp.use(t, s1); got != moved {
			t.Fatalf("re-homed session went to %s, want %s", got, moved)
		}
	}
	want := fmt.Sprintf(`"session":"s1","from":"%s","to":"%s"`, home, moved)
	if logs := tp.logs.String(); !strings.Contains(logs, want) || !strings.Contains(logs, `"level":"info"`) {
		t.Errorf("log lacks the move %s:\n%s", want, logs)
	}

	// The old home recovers (here: removed, and re-added after the
	// tracker forgot it, so eligible again): the session does not jump
	// back.
	var rest []Spec
	for _, s := range specs("a", "b", "c") {
		if s.Name != home {
			rest = append(rest, s)
		}
	}
	if _, _, err := tp.Update(rest); err != nil {
		t.Fatal(err)
	}
	clock.Advance(16 * time.Minute) // past health's memory of removed records
	if _, _, err := tp.Update(specs("a", "b", "c")); err != nil {
		t.Fatal(err)
	}
	if !tp.tr.Eligible(tp.Lookup(home).Record()) {
		t.Fatalf("%s not eligible after re-adding", home)
	}
	for i := 0; i < 6; i++ {
		if got := tp.use(t, s1); got != moved {
			t.Fatalf("after %s recovered the session went to %s, want %s", home, got, moved)
		}
	}
	if n := strings.Count(tp.logs.String(), "session moved"); n != 1 {
		t.Errorf("%d session moves logged, want 1", n)
	}
}

func TestSessionTTLSlidesAndExpires(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	ttl := 10 * time.Minute
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", SessionTTL: ttl, WaitForUpstream: time.Millisecond}, clock, specs("a", "b", "c")...)
	s := Request{Addr: "example.com:443", Session: "x"}
	home := tp.use(t, s) // cursor 0: a
	for i := 0; i < 4; i++ {
		clock.Advance(ttl * 3 / 4) // each use slides the TTL
		if got := tp.use(t, s); got != home {
			t.Fatalf("slide %d: got %s, want %s", i, got, home)
		}
	}
	clock.Advance(ttl + time.Second)
	if key := tp.sessions.lookup("x"); key != "" {
		t.Fatalf("session still bound to %s after its TTL", key)
	}
	// Expired: the pick is the strategy's again (the cursor has moved past a).
	if got := tp.use(t, s); got == home {
		t.Errorf("expired session still went to %s", home)
	}
}

func TestSessionMemoryBounded(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	ss := newSessions(time.Minute, 1000, clock)
	e := &Endpoint{Name: "a", Key: "socks5://a:1"}
	for i := 0; i < ss.max+10; i++ {
		ss.bind(fmt.Sprint(i), e, 0)
	}
	if n := ss.len(); n > ss.max {
		t.Fatalf("%d sessions held, cap %d", n, ss.max)
	}
	clock.Advance(2 * time.Minute) // all expired, and a sweep is due in every shard
	for i := 0; i < 200; i++ {
		ss.bind(fmt.Sprint("fresh", i), e, 0)
	}
	if n := ss.len(); n != 200 {
		t.Errorf("%d sessions after the sweep, want the 200 fresh ones", n)
	}
}

func TestTagsRestrictSelection(t *testing.T) {
	sp := specs("us-res", "us-dc", "de")
	sp[0].Tags = []string{"us", "residential"}
	sp[1].Tags = []string{"us", "dc"}
	sp[2].Tags = []string{"de"}
	tp := newTestPool(t, PoolConfig{Strategy: "random", WaitForUpstream: 10 * time.Millisecond}, nil, sp...)
	tests := []struct {
		tags []string
		want map[string]bool
	}{
		{nil, map[string]bool{"us-res": true, "us-dc": true, "de": true}},
		{[]string{"us"}, map[string]bool{"us-res": true, "us-dc": true}},
		{[]string{"us", "residential"}, map[string]bool{"us-res": true}},
		{[]string{"residential", "us"}, map[string]bool{"us-res": true}},
		{[]string{"de"}, map[string]bool{"de": true}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.tags, "+"), func(t *testing.T) {
			seen := map[string]bool{}
			for i := 0; i < 200; i++ {
				got := tp.use(t, Request{Addr: "example.com:443", Tags: tc.tags})
				if !tc.want[got] {
					t.Fatalf("tags %v picked %q", tc.tags, got)
				}
				seen[got] = true
			}
			if len(seen) != len(tc.want) {
				t.Errorf("tags %v reached %v, want all of %v", tc.tags, seen, tc.want)
			}
		})
	}
}

func TestTagsNoneEligibleFailsNamingTags(t *testing.T) {
	sp := specs("us-1", "de")
	sp[0].Tags = []string{"us"}
	sp[1].Tags = []string{"de"}
	tp := newTestPool(t, PoolConfig{WaitForUpstream: 20 * time.Millisecond}, nil, sp...)
	tp.disable(t, "us-1")
	tests := []struct {
		name     string
		tags     []string
		matching int
		text     string
	}{
		{"configured but not eligible", []string{"us"}, 1, `no eligible upstream: the only upstream with tags "us" is disabled`},
		{"no upstream has them", []string{"us", "mobile"}, 0, `no upstream has tags "us", "mobile"`},
		// Quoted: "no upstream has tags us" read as if us did not exist.
		{"trailing space", []string{"us "}, 0, `no upstream has tags "us "`},
		{"other case", []string{"US"}, 0, `no upstream has tags "US"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tp.NewAttempts(Request{Addr: "example.com:443", Tags: tc.tags}).Next(context.Background())
			if !errors.Is(err, ErrNoEligible) {
				t.Fatalf("err = %v, want ErrNoEligible", err)
			}
			var ne *NoEligibleError
			if !errors.As(err, &ne) || ne.Matching != tc.matching {
				t.Fatalf("err = %#v, want *NoEligibleError with Matching %d", err, tc.matching)
			}
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("error %q does not say %q", err, tc.text)
			}
		})
	}
	// Without tags the error says why the upstreams are out, and how
	// long the request waited.
	tp.disable(t, "de")
	_, err := tp.NewAttempts(Request{Addr: "example.com:443"}).Next(context.Background())
	var ne *NoEligibleError
	want := "no eligible upstream: 2 disabled"
	if !errors.As(err, &ne) || err.Error() != want || ne.Wait != 20*time.Millisecond {
		t.Errorf("untagged: err = %#v, want %q waited 20ms", err, want)
	}
}

func TestPerTargetBanKeepsServingOtherHosts(t *testing.T) {
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: 10 * time.Millisecond}, nil, specs("a")...)
	a := tp.Lookup("a")
	tp.Report(a, &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus,
		Target: "banned.example", Err: errors.New("target answered 403")})
	if snap := tp.tr.Snapshot(a.Record()); snap.State != health.Eligible || len(snap.Targets) != 1 || snap.Targets[0].Host != "banned.example" {
		t.Fatalf("snapshot: state %v targets %+v; want eligible with one target cooldown for banned.example", snap.State, snap.Targets)
	}
	for _, tc := range []struct{ addr, want string }{
		{"banned.example:443", ""},
		{"BANNED.example:80", ""}, // the key is the host, without port, case-folded
		{"other.example:443", "a"},
		{"sub.banned.example:443", "a"},
	} {
		if got := tp.use(t, Request{Addr: tc.addr}); got != tc.want {
			t.Errorf("%s: picked %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestIdentityIncludesCredentials(t *testing.T) {
	u := func(s string) *url.URL {
		pu, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return pu
	}
	tp := newTestPool(t, PoolConfig{}, nil,
		Spec{URL: u("socks5://alice-zone-us:pw1@gw.example:7777")},
		Spec{URL: u("socks5://bob-zone-de:pw2@gw.example:7777")},
		Spec{URL: u("http://solo:pw3@other.example:8080")},
	)
	eps := tp.Endpoints()
	if len(eps) != 3 {
		t.Fatalf("%d endpoints, want 3", len(eps))
	}
	want := []string{"alice-zone-us@gw.example:7777", "bob-zone-de@gw.example:7777", "other.example:8080"}
	for i, e := range eps {
		if e.Name != want[i] {
			t.Errorf("endpoint %d named %q, want %q", i, e.Name, want[i])
		}
		if tp.Lookup(want[i]) != e {
			t.Errorf("Lookup(%q) does not find it", want[i])
		}
		if strings.Contains(e.Name+e.Key+e.Redacted(), "pw") {
			t.Errorf("endpoint %d leaks a password: %s %s %s", i, e.Name, e.Key, e.Redacted())
		}
	}
	if eps[0].Key == eps[1].Key || eps[0].Record() == eps[1].Record() {
		t.Error("same host:port with different users share an identity")
	}
	_, _, err := tp.Update([]Spec{{URL: u("socks5://alice-zone-us:pw1@gw.example:7777")}, {URL: u("socks5://alice-zone-us:other@gw.example:7777")}})
	if err == nil || strings.Contains(err.Error(), "other") {
		t.Errorf("same user twice: err = %v, want a duplicate error without the password", err)
	}
}

// TestMaxConnsUnderLoad runs many concurrent short tunnels over endpoints
// with max_conns and checks that no endpoint ever holds more, that clients
// finding every endpoint saturated are served when a slot frees (not
// failed), and that the active counters return to zero.
func TestMaxConnsUnderLoad(t *testing.T) {
	sp := specs("a", "b")
	sp[0].MaxConns, sp[1].MaxConns = 3, 2
	for _, strat := range []string{"round-robin", "random", "least-conn", "weighted", "lowest-latency"} {
		t.Run(strat, func(t *testing.T) {
			tp := newTestPool(t, PoolConfig{Strategy: strat, WaitForUpstream: time.Minute}, nil, sp...)
			limit := map[string]int64{"a": 3, "b": 2}
			var cur, peak [2]atomic.Int64
			idx := map[string]int{"a": 0, "b": 1}
			var wg sync.WaitGroup
			var served atomic.Int64
			for w := 0; w < 16; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 50; i++ {
						a := tp.NewAttempts(Request{Addr: "example.com:443"})
						e, err := a.Next(context.Background())
						if err != nil {
							t.Errorf("Next: %v", err)
							return
						}
						k := idx[e.Name]
						n := cur[k].Add(1)
						for p := peak[k].Load(); n > p && !peak[k].CompareAndSwap(p, n); p = peak[k].Load() {
						}
						a.Succeeded(e)
						runtime.Gosched()
						cur[k].Add(-1)
						tp.Release(e)
						served.Add(1)
					}
				}()
			}
			wg.Wait()
			if served.Load() != 16*50 {
				t.Fatalf("served %d, want %d", served.Load(), 16*50)
			}
			for name, k := range idx {
				if p := peak[k].Load(); p > limit[name] {
					t.Errorf("%s: %d concurrent tunnels, max_conns %d", name, p, limit[name])
				}
				if n := tp.Lookup(name).Active(); n != 0 {
					t.Errorf("%s: Active() = %d after every tunnel ended", name, n)
				}
			}
		})
	}
}

// TestRateLimitUnderLoad: a rate of 2/s admits exactly its burst among
// concurrent picks in one instant, and refills with the clock.
func TestRateLimitUnderLoad(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	sp := specs("a")
	sp[0].Rate = 2
	tp := newTestPool(t, PoolConfig{}, clock, sp...)
	round := func() int64 {
		var got atomic.Int64
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if e := tp.pick(tp.NewAttempts(Request{Addr: "example.com:443"})); e != nil {
					got.Add(1)
					tp.Release(e)
				}
			}()
		}
		wg.Wait()
		return got.Load()
	}
	if n := round(); n != 2 {
		t.Fatalf("first instant: %d tunnels admitted, want the burst of 2", n)
	}
	if n := round(); n != 0 {
		t.Fatalf("same instant again: %d admitted, want 0", n)
	}
	clock.Advance(500 * time.Millisecond)
	if n := round(); n != 1 {
		t.Fatalf("after 0.5s: %d admitted, want 1", n)
	}
	clock.Advance(10 * time.Second)
	if n := round(); n != 2 {
		t.Fatalf("after 10s: %d admitted, want the burst of 2 (not 20)", n)
	}
}

// TestLimitChecksSpendNothingOnRefusal: a refused pick costs neither a rate
// token nor a slot.
func TestLimitChecksSpendNothingOnRefusal(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	sp := specs("a")
	sp[0].Rate, sp[0].MaxConns = 1, 1
	tp := newTestPool(t, PoolConfig{}, clock, sp...)
	a := tp.Lookup("a")
	tp.Report(a, &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: "banned.example", Err: errors.New("403")})

	// Refused by the per-target cooldown after the rate check: the token
	// is refunded.
	if e := tp.pick(tp.NewAttempts(Request{Addr: "banned.example:443"})); e != nil {
		t.Fatal("banned host admitted")
	}
	if a.Active() != 0 {
		t.Fatalf("refused pick left Active() = %d", a.Active())
	}
	e := tp.pick(tp.NewAttempts(Request{Addr: "other.example:443"}))
	if e == nil {
		t.Fatal("the rate token of a refused pick was spent")
	}
	// Refused by max_conns (before the rate check): no token taken.
	clock.Advance(time.Second)
	if e2 := tp.pick(tp.NewAttempts(Request{Addr: "other.example:443"})); e2 != nil {
		t.Fatal("max_conns 1 admitted a second tunnel")
	}
	tp.Release(e)
	if e3 := tp.pick(tp.NewAttempts(Request{Addr: "other.example:443"})); e3 == nil {
		t.Fatal("saturated pick spent the rate token")
	} else {
		tp.Release(e3)
	}
	if a.Active() != 0 {
		t.Errorf("Active() = %d, want 0", a.Active())
	}
}

// TestDialCountsExactlyAndRecordsLatency dials through a working and a
// refusing fake upstream: failed attempts and finished leases leave no
// active count, double Done is harmless, and successful dials feed the
// latency average.
func TestDialCountsExactlyAndRecordsLatency(t *testing.T) {
	target, addr := upstreamtest.ListenerAddr(t)
	go func() {
		for {
			c, err := target.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	good := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	bad := upstreamtest.NewSOCKS5(t, upstreamtest.Options{Mode: upstreamtest.Mode{Fault: upstreamtest.Refuse}})
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", MaxAttempts: 2}, nil,
		Spec{Name: "bad", URL: bad.URL()}, Spec{Name: "good", URL: good.URL()})
	for i := 0; i < 2; i++ {
		l, err := tp.Dial(context.Background(), Request{Addr: addr})
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		if l.Endpoint.Name != "good" {
			t.Fatalf("leased %s", l.Endpoint.Name)
		}
		l.Conn.Close()
		l.Done()
		l.Done()
	}
	for _, n := range []string{"bad", "good"} {
		if a := tp.Lookup(n).Active(); a != 0 {
			t.Errorf("%s: Active() = %d, want 0", n, a)
		}
	}
	if tp.Lookup("good").Latency() <= 0 {
		t.Error("no latency recorded for the successful dials")
	}
}

// TestReloadKeepsCounters: a reload that rebuilds an endpoint keeps its
// active count shared, so a lease from before the reload releases the
// counter the new endpoint checks.
func TestReloadKeepsCounters(t *testing.T) {
	sp := specs("a")
	sp[0].MaxConns = 1
	tp := newTestPool(t, PoolConfig{WaitForUpstream: time.Millisecond}, nil, sp...)
	a := tp.NewAttempts(Request{Addr: "example.com:443"})
	old, err := a.Next(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sp[0].Tags = []string{"changed"} // forces a new *Endpoint
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	cur := tp.Lookup("a")
	if cur == old {
		t.Fatal("endpoint not rebuilt")
	}
	if cur.Active() != 1 {
		t.Fatalf("new endpoint Active() = %d, want the open tunnel", cur.Active())
	}
	tp.Release(old)
	if got := tp.use(t, Request{Addr: "example.com:443"}); got != "a" {
		t.Fatalf("after the old tunnel ended the slot is still taken (got %q)", got)
	}
	sp[0].Tags = []string{"changed"}
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	if tp.Lookup("a") != cur {
		t.Error("an unchanged spec rebuilt its endpoint")
	}
}

func TestRedactNeverShowsPasswords(t *testing.T) {
	tests := []struct{ raw, want string }{
		{"socks5://u:secret@10.0.0.1:1080", "socks5://u:xxxxx@10.0.0.1:1080"},
		{"http://u@10.0.0.1:8080", "http://u@10.0.0.1:8080"},
		{"scraper:secret@10.0.0.1:1080", "scraper:xxxxx@10.0.0.1:1080"}, // seller line taken for a URL
		{"gw.example:8000:user:secret", "gw.example:xxxxx"},
	}
	for _, tc := range tests {
		u, err := url.Parse(tc.raw)
		if err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		if got := Redact(u); got != tc.want {
			t.Errorf("Redact(%s) = %q, want %q", tc.raw, got, tc.want)
		}
		if err := ValidateURL(u); err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("ValidateURL(%s) echoes the password: %v", tc.raw, err)
		}
	}
}

// TestTagsNobodyHasFailAtOnce: a request for tags no upstream carries is
// told so at once, not after wait_for_upstream (here an hour on a clock
// that never moves). Issue: the client waited the full 10s although the
// log already said "no upstream has tags x".
func TestTagsNobodyHasFailAtOnce(t *testing.T) {
	clock := healthtest.NewClock(time.Time{})
	sp := specs("us-1", "de")
	sp[0].Tags, sp[1].Tags = []string{"us"}, []string{"de"}
	tp := newTestPool(t, PoolConfig{WaitForUpstream: time.Hour}, clock, sp...)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a guard only: the old code waited
	defer cancel()
	for tags, want := range map[string]string{"x": `no upstream has tags "x"`, "us de": `no upstream has tags "us", "de"`} {
		tags := strings.Fields(tags)
		_, err := tp.NewAttempts(Request{Addr: "example.com:443", Tags: tags}).Next(ctx)
		var ne *NoEligibleError
		if !errors.As(err, &ne) || ne.Matching != 0 || !errors.Is(err, ErrNoEligible) {
			t.Fatalf("tags %v: err = %v, want a *NoEligibleError with Matching 0", tags, err)
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("tags %v: err = %q, want it to say %q", tags, err, want)
		}
	}
	// Tags an upstream has, none of it eligible: the request still waits
	// (a probe may readmit it), until the wait or the client ends.
	tp.disable(t, "de")
	short, cancel2 := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel2()
	if _, err := tp.NewAttempts(Request{Addr: "example.com:443", Tags: []string{"de"}}).Next(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("tags de (configured, disabled): err = %v, want it to wait until the client gives up", err)
	}
}

// TestNoEligibleNamesLimits: when the upstreams a request may use are
// eligible but at their max_conns or rate limit, the error says so.
// Issue: the client got "none of the 2 upstreams with tags res is
// eligible" while /api/upstreams showed both eligible.
func TestNoEligibleNamesLimits(t *testing.T) {
	sp := specs("res-1", "res-2", "res-3", "other")
	for i := range sp[:3] {
		sp[i].Tags = []string{"res"}
	}
	sp[0].MaxConns, sp[1].MaxConns = 1, 1
	sp[2].Rate = 0.001 // one token, the next in 1000s
	sp[3].MaxConns = 1
	tp := newTestPool(t, PoolConfig{WaitForUpstream: 20 * time.Millisecond}, nil, sp...)
	next := func(tags ...string) error {
		t.Helper()
		e, err := tp.NewAttempts(Request{Addr: "example.com:443", Tags: tags}).Next(t.Context())
		if err == nil {
			tp.Release(e)
			t.Fatalf("tags %v: picked %s, want none", tags, e.Name)
		}
		if !errors.Is(err, ErrNoEligible) {
			t.Fatalf("tags %v: err = %v, want ErrNoEligible", tags, err)
		}
		return err
	}
	t.Cleanup(tp.hold(t, "res-1", 1))
	t.Cleanup(tp.hold(t, "res-2", 1))
	t.Cleanup(tp.hold(t, "other", 1))
	if got := tp.use(t, Request{Addr: "example.com:443", Tags: []string{"res"}}); got != "res-3" {
		t.Fatalf("first pick %q, want res-3 (its one rate token)", got)
	}
	tests := []struct {
		name string
		do   func()
		tags []string
		want string
	}{
		{"max_conns and rate", nil, []string{"res"},
			"no eligible upstream: the 3 upstreams with tags \"res\" are eligible but all at their max_conns or rate limit"},
		{"max_conns, untagged", func() { tp.disable(t, "res-1"); tp.disable(t, "res-2"); tp.disable(t, "res-3") }, nil,
			"no eligible upstream: 1 of the 4 upstreams is eligible but at its max_conns, the rest are out: 3 disabled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.do != nil {
				tc.do()
			}
			if err := next(tc.tags...); err.Error() != tc.want {
				t.Errorf("err = %q\nwant  %q", err, tc.want)
			}
		})
	}
}
