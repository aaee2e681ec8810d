package health_test

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestTargetOutageThroughPool is TestTargetOutageCoolsNoOne with real
// sockets, as the tester ran it: five SOCKS5 upstreams, two targets at
// 127.0.0.2:P and 127.0.0.3:P, ten tunnels alternating hosts, both
// targets killed, ten more tunnels (each REP 5: target_unreachable). No
// upstream may cool: the hosts are down, not the proxies.
func TestTargetOutageThroughPool(t *testing.T) {
	targets := sameTwoPortTargets(t)
	tr := health.NewTracker(health.Config{StartEligible: true, SlowStart: -1}, nil, zerolog.Nop())
	p, err := upstream.NewPool(upstream.PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Second},
		upstream.DialConfig{ConnectTimeout: 10 * time.Second, HandshakeTimeout: 10 * time.Second, AllowPrivate: true}, tr, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	var specs []upstream.Spec
	for i := range 5 {
		fk := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
		specs = append(specs, upstream.Spec{Name: "s" + strconv.Itoa(i), URL: fk.URL()})
	}
	if _, _, err := p.Update(specs); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		l, err := p.Dial(t.Context(), upstream.Request{Addr: targets.addrs[i%2]})
		if err != nil {
			t.Fatalf("tunnel %d before the outage: %v", i, err)
		}
		l.Conn.Close()
		l.Done()
	}
	targets.close()
	for i := range 10 {
		_, err := p.Dial(t.Context(), upstream.Request{Addr: targets.addrs[i%2]})
		var f *health.Failure
		if !errors.As(err, &f) || f.Class != health.TargetUnreachable {
			t.Fatalf("tunnel %d during the outage: %v, want target_unreachable", i, err)
		}
	}
	for _, e := range p.Endpoints() {
		if s := tr.Snapshot(e.Record()); s.State != health.Eligible {
			t.Errorf("%s: %v %v/%v %q: the targets' outage cooled a healthy upstream", s.Name, s.State, s.Reason, s.Stage, s.Detail)
		}
	}
}

// twoTargets are TCP listeners on 127.0.0.2 and 127.0.0.3 at one port
// that accept and close every connection.
type twoTargets struct {
	addrs [2]string
	lns   [2]net.Listener
	wg    sync.WaitGroup
	once  sync.Once
}

// sameTwoPortTargets starts twoTargets; t.Cleanup closes them. The port
// is the first one free on both addresses (a few tries).
func sameTwoPortTargets(t *testing.T) *twoTargets {
	t.Helper()
	tt := &twoTargets{}
	for try := 0; ; try++ {
		a, err := net.Listen("tcp", "127.0.0.2:0")
		if err != nil {
			t.Fatalf("listen on 127.0.0.2: %v", err)
		}
		_, port, _ := net.SplitHostPort(a.Addr().String())
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.3", port))
		if err != nil {
			a.Close()
			if try < 20 {
				continue
			}
			t.Fatalf("listen on 127.0.0.3:%s: %v", port, err)
		}
		tt.lns = [2]net.Listener{a, b}
		break
	}
	for i, ln := range tt.lns {
		tt.addrs[i] = ln.Addr().String()
		tt.wg.Add(1)
		go func() { // exits when close closes ln
			defer tt.wg.Done()
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	t.Cleanup(tt.close)
	return tt
}

func (tt *twoTargets) close() {
	tt.once.Do(func() {
		for _, ln := range tt.lns {
			ln.Close()
		}
		tt.wg.Wait()
	})
}
