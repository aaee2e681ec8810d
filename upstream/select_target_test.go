package upstream

import (
	"fmt"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestRoundRobinAlternatingHostsWithHostCooldown: a client alternating two
// hosts, one of which an upstream is cooling for, gets the other host's
// requests spread over every upstream. Issue: the picks for the cooled
// host stepped the shared cursor past that upstream, taking a turn of the
// other host's each time, so the other host's requests locked into one
// upstream (3 upstreams: b.example got e2 every time), or into half of
// them (4 upstreams).
func TestRoundRobinAlternatingHostsWithHostCooldown(t *testing.T) {
	const rounds = 400
	ban := &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: "a.example"}
	for _, tc := range []struct {
		name   string
		n      int
		tagged []int // endpoints carrying tag t, asked for by both hosts; nil: no tags
	}{
		{"3 upstreams", 3, nil},
		{"4 upstreams", 4, nil},
		{"5 upstreams", 5, nil},
		{"4 of 5 tagged", 5, []int{0, 1, 3, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := make([]Spec, tc.n)
			for i := range sp {
				sp[i] = spec(fmt.Sprintf("e%d", i), 10000+i)
			}
			var tags []string
			members := make([]string, 0, tc.n)
			if tc.tagged == nil {
				for i := range sp {
					members = append(members, sp[i].Name)
				}
			} else {
				tags = []string{"t"}
				for _, i := range tc.tagged {
					sp[i].Tags = tags
					members = append(members, sp[i].Name)
				}
			}
			tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, sp...)
			cooled := tp.Lookup(members[0])
			tp.Report(cooled, ban)
			a, b := Request{Addr: "a.example:443", Tags: tags}, Request{Addr: "b.example:443", Tags: tags}
			gotA, gotB := map[string]int{}, map[string]int{}
			for range rounds {
				gotA[tp.use(t, a)]++
				gotB[tp.use(t, b)]++
			}
			if gotA[cooled.Name] != 0 {
				t.Fatalf("a.example sent to %s, which is cooling for it: %v", cooled.Name, gotA)
			}
			for _, n := range members {
				if want := rounds / len(members); !within(gotB[n], want, 0.1) {
					t.Errorf("b.example: picks %v, want %v about %d each", gotB, members, want)
					break
				}
			}
			for _, n := range members[1:] {
				if want := rounds / (len(members) - 1); !within(gotA[n], want, 0.1) {
					t.Errorf("a.example: picks %v, want %v about %d each", gotA, members[1:], want)
					break
				}
			}
		})
	}
}

// BenchmarkPickDetoured is BenchmarkPick under round-robin for a host
// that one upstream of the pool is cooling for (its picks take their own
// turn, see rrDetours), and for another host once the set has detours.
func BenchmarkPickDetoured(b *testing.B) {
	ban := &health.Failure{Class: health.TargetHTTPError, Stage: health.StageHTTPStatus, Target: "shop.example"}
	for _, n := range []int{10, 100_000} {
		for _, host := range []string{"shop.example:443", "news.example:443"} {
			b.Run(fmt.Sprintf("n=%d/%s", n, host), func(b *testing.B) {
				tp := benchPool(b, "round-robin", n, false)
				tp.Report(tp.Endpoints()[0], ban)
				for range 2 * n { // until a pick for shop.example met the cooled one
					tp.release(tp.pick(tp.NewAttempts(Request{Addr: "shop.example:443"})))
				}
				if tp.set.Load().detours.Load() == nil {
					b.Fatal("no detour")
				}
				a := tp.NewAttempts(Request{Addr: host})
				b.ReportAllocs()
				for b.Loop() {
					e := tp.pick(a)
					if e == nil {
						b.Fatal("no pick")
					}
					tp.release(e)
				}
			})
		}
	}
}
