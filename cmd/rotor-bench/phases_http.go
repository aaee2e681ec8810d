package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"
)

// httpResult is one plain-HTTP request-rate measurement through one path.
type httpResult struct {
	Path       string  `json:"path"`
	Round      int     `json:"round"` // 1-based; 0 is the warm-up
	Workers    int     `json:"workers"`
	Requests   int     `json:"requests"`
	Failures   int     `json:"failures"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	Rate       float64 `json:"requests_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	cpuUse
}

// runHTTP runs workers keep-alive clients for -duration, each with its own
// http.Transport (one idle conn), issuing GET to the HTTP target. proxy
// selects the path: nil is the target directly; an http:// proxy makes
// net/http send absolute-URI requests (the gateway's HTTP front); a
// socks5:// proxy tunnels keep-alive HTTP through the relay.
func runHTTP(ctx context.Context, e *env, path string, proxy *url.URL, workers int) httpResult {
	res := httpResult{Path: path, Workers: workers}
	var errs errList
	mark := e.mark()
	start := time.Now()
	end := start.Add(e.dur)
	lats := make([][]time.Duration, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() { // ends when the phase deadline passes
			defer wg.Done()
			lats[w] = httpWorker(ctx, e.httpURL+"bench", proxy, end, &errs)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.cpuUse = e.since(mark)
	all := slices.Concat(lats...)
	slices.Sort(all)
	res.Requests, res.Failures, res.FirstError = len(all), errs.n, errs.first
	res.Seconds = elapsed.Seconds()
	res.Rate = float64(res.Requests) / res.Seconds
	res.P50Ms, res.P99Ms = ms(quantile(all, 0.50)), ms(quantile(all, 0.99))
	return res
}

func httpWorker(ctx context.Context, target string, proxy *url.URL, end time.Time, errs *errList) []time.Duration {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	if proxy != nil {
		tr.Proxy = http.ProxyURL(proxy)
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	lats := make([]time.Duration, 0, 8192)
	for ctx.Err() == nil {
		t0 := time.Now()
		if t0.After(end) {
			break
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			errs.add(err)
			break
		}
		resp, err := client.Do(req)
		if err != nil {
			errs.add(err)
			continue
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			errs.add(err)
		case resp.StatusCode != http.StatusOK || n != int64(len(httpBody)):
			errs.add(fmt.Errorf("status %d, %d body bytes", resp.StatusCode, n))
		default:
			lats = append(lats, time.Since(t0))
		}
	}
	return lats
}
