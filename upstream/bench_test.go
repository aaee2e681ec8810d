package upstream

// Selection and reporting micro-benchmarks (issue 8 targets: a pick at
// 100,000 endpoints and an outcome report under contention both within
// 200 ns/op). Run them with
//
//	go test -run '^$' -bench . -benchmem ./upstream/
//
// None of them asserts a time.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// benchPool builds a pool of n eligible endpoints (distinct identities,
// never dialled); with cooling, 9 in 10 are then cooled by a refused
// failure.
func benchPool(b *testing.B, strategy string, n int, cooling bool) *testPool {
	b.Helper()
	sp := make([]Spec, n)
	for i := range sp {
		sp[i] = Spec{URL: &url.URL{Scheme: "socks5", Host: fmt.Sprintf("10.%d.%d.%d:1080", i>>16&255, i>>8&255, i&255)},
			Weight: 1 + i%3}
	}
	tp := newTestPool(b, PoolConfig{Strategy: strategy}, nil, sp...)
	for i, e := range tp.Endpoints() {
		if strategy == "lowest-latency" {
			e.ld.lat.Store(packLat(uint64(1000+i%997), latSecond(e.clock.Now())))
		}
		if cooling && i%10 != 0 {
			tp.Report(e, &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("refused")})
		}
	}
	return tp
}

// reportCPU adds cpu-ns/op: the benchmark thread's CPU time per op since
// start, which a loaded shared machine inflates far less than ns/op.
func reportCPU(b *testing.B, start time.Duration) {
	if start == 0 || b.N == 0 {
		return
	}
	b.ReportMetric(float64(threadCPU()-start)/float64(b.N), "cpu-ns/op")
}

var benchStrategies = []string{"round-robin", "random", "least-conn", "weighted", "lowest-latency"}

// BenchmarkPick is one pick and its release, the pool's per-tunnel
// selection cost, by strategy, pool size and share of eligible endpoints.
func BenchmarkPick(b *testing.B) {
	for _, st := range benchStrategies {
		for _, n := range []int{10, 1000, 100_000} {
			for _, cooling := range []bool{false, true} {
				name := fmt.Sprintf("%s/n=%d/eligible=100%%", st, n)
				if cooling {
					name = fmt.Sprintf("%s/n=%d/eligible=10%%", st, n)
				}
				b.Run(name, func(b *testing.B) {
					tp := benchPool(b, st, n, cooling)
					a := tp.NewAttempts(Request{Addr: "example.com:443"})
					b.ReportAllocs()
					lockThread()
					defer unlockThread()
					cpu := threadCPU()
					for b.Loop() {
						e := tp.pick(a)
						if e == nil {
							b.Fatal("no pick")
						}
						tp.release(e)
					}
					reportCPU(b, cpu)
				})
			}
		}
	}
}

// BenchmarkPickTagged is BenchmarkPick for a request with a tag that 1
// in 10 of 100,000 endpoints carry (its view: 10,000), every one eligible.
func BenchmarkPickTagged(b *testing.B) {
	for _, st := range benchStrategies {
		b.Run(st, func(b *testing.B) {
			sp := make([]Spec, 100_000)
			for i := range sp {
				sp[i] = Spec{URL: &url.URL{Scheme: "socks5", Host: fmt.Sprintf("10.%d.%d.%d:1080", i>>16&255, i>>8&255, i&255)},
					Weight: 1 + i%3}
				if i%10 == 3 {
					sp[i].Tags = []string{"t"}
				}
			}
			tp := newTestPool(b, PoolConfig{Strategy: st}, nil, sp...)
			a := tp.NewAttempts(Request{Addr: "example.com:443", Tags: []string{"t"}})
			b.ReportAllocs()
			lockThread()
			defer unlockThread()
			cpu := threadCPU()
			for b.Loop() {
				e := tp.pick(a)
				if e == nil {
					b.Fatal("no pick")
				}
				tp.release(e)
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkPickParallel is BenchmarkPick from every core at once at
// 100,000 endpoints (shared cursor, shared counters).
func BenchmarkPickParallel(b *testing.B) {
	for _, st := range benchStrategies {
		b.Run(st, func(b *testing.B) {
			tp := benchPool(b, st, 100_000, false)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				a := tp.NewAttempts(Request{Addr: "example.com:443"})
				for pb.Next() {
					e := tp.pick(a)
					if e == nil {
						b.Error("no pick")
						return
					}
					tp.release(e)
				}
			})
		})
	}
}

// BenchmarkPickSession is a pick of a request whose session is bound.
func BenchmarkPickSession(b *testing.B) {
	tp := benchPool(b, "round-robin", 1000, false)
	var id atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		a := tp.NewAttempts(Request{Addr: "example.com:443", Session: fmt.Sprint("s", id.Add(1))})
		for pb.Next() {
			e := tp.pick(a)
			if e == nil {
				b.Error("no pick")
				return
			}
			a.Succeeded(e)
			tp.release(e)
		}
	})
}

// BenchmarkReport is outcome reporting under contention: every core
// reporting on endpoints of one pool (a few hot ones, or spread).
func BenchmarkReport(b *testing.B) {
	for _, spread := range []int{4, 1000} {
		tp := benchPool(b, "round-robin", 1000, false)
		eps := tp.Endpoints()[:spread]
		b.Run(fmt.Sprintf("succeeded/endpoints=%d", spread), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				a := tp.NewAttempts(Request{Addr: "example.com:443"})
				i := 0
				for pb.Next() {
					a.Succeeded(eps[i%len(eps)])
					i++
				}
			})
		})
		b.Run(fmt.Sprintf("fail/endpoints=%d", spread), func(b *testing.B) {
			f := &health.Failure{Class: health.Timeout, Stage: health.StageFirstByte, Err: errors.New("timeout")}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					tp.Report(eps[i%len(eps)], f)
					i++
				}
			})
		})
		b.Run(fmt.Sprintf("release/endpoints=%d", spread), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					e := eps[i%len(eps)]
					reserve(e.ld, int64(e.MaxConns))
					tp.release(e)
					i++
				}
			})
		})
	}
}

// BenchmarkChase is the machine's floor for issue 8: one dependent load
// (a pointer chase through a random cycle of cache lines) in a working
// set of each size. A pick at 100,000 endpoints makes two dependent loads
// beyond the L2 (an entry, a pointer or a load in a 0.8–1.6 MiB array,
// then the Endpoint, one line of 17.6 MiB of them, which the release
// reads), so it costs at least about the 1 MiB figure plus the 16 MiB one.
func BenchmarkChase(b *testing.B) {
	for _, mib := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("MiB=%d", mib), func(b *testing.B) {
			lines := mib << 20 >> 6
			next := make([]int64, lines*8) // one link per 64-byte line
			perm := rand.Perm(lines)
			for k, l := range perm {
				next[l*8] = int64(perm[(k+1)%lines] * 8)
			}
			lockThread()
			defer unlockThread()
			cpu := threadCPU()
			var x int64
			for b.Loop() {
				x = next[x]
			}
			reportCPU(b, cpu)
			if x < 0 {
				b.Fatal("unreachable") // keeps x live
			}
		})
	}
}
