package gateway

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
	"github.com/rs/zerolog"
)

// BenchmarkForward measures plain-HTTP forwarding through the HTTP front
// and a direct upstream to a loopback target, with keep-alive clients.
func BenchmarkForward(b *testing.B) {
	target := upstreamtest.NewTarget(b)
	cfg, err := ParseConfig("b.toml", []byte(fmt.Sprintf("allow_private_destinations = true\n[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\n[listen]\nsocks5 = \"\"\nhttp = \"127.0.0.1:0\"\nadmin = \"\"\n")))
	if err != nil {
		b.Fatal(err)
	}
	srv, err := New(cfg, Options{Log: zerolog.New(io.Discard)})
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(b.Context()) })
	pu, _ := url.Parse("http://" + srv.Addr("http"))
	tr := &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: 64}
	b.Cleanup(tr.CloseIdleConnections)
	c := &http.Client{Transport: tr}
	u := target.URL("/ok")
	b.ReportAllocs()
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			resp, err := c.Get(u)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
}

// BenchmarkPoolMemory loads a config of 100,000 socks5 upstreams (with
// credentials, as seller lists have) and reports the live heap each one
// costs once loaded: its endpoint, health record and parsed config.
// A record grows its history and failure counters only when it fails.
func BenchmarkPoolMemory(b *testing.B) {
	const n = 100_000
	var sb strings.Builder
	sb.WriteString("[listen]\nsocks5 = \"127.0.0.1:0\"\n")
	for i := range n {
		fmt.Fprintf(&sb, "\n[[upstream]]\nurl = \"socks5://u%d:p%d@127.%d.%d.%d:1080\"\n", i, i, i>>16&255, i>>8&255, i&255)
	}
	text := []byte(sb.String())
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		cfg, err := ParseConfig("rotor.toml", text)
		if err != nil {
			b.Fatal(err)
		}
		srv, err := New(cfg, Options{Log: zerolog.New(io.Discard)})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/upstream")
		runtime.KeepAlive(srv)
	}
}
