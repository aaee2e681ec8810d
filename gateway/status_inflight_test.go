package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// TestStatusCountsForwardedRequestsInFlight: with 2 slow plain-HTTP
// downloads and 1 SOCKS5 one, the upstream rows added up to 3 while the
// open-tunnels figure (/api/status, the page, rotor_tunnels_active,
// rotor_tunnels_open) said 1: forwarded requests in progress were counted
// nowhere. They are now their own figure, requests in flight, and the
// two add up to the rows' active.
func TestStatusCountsForwardedRequestsInFlight(t *testing.T) {
	release := make(chan struct{})
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		if _, err := rt.readHead(br); err != nil {
			return
		}
		// Half the body now, the rest once the test has looked.
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\na"); err != nil {
			return
		}
		<-release
		_, _ = io.WriteString(c, "b")
	})
	srv := directGateway(t)
	admin := "http://" + srv.Addr("admin")

	done := make(chan error, 3)
	get := func(c *http.Client) {
		resp, err := c.Get("http://" + rt.Addr() + "/slow")
		if err == nil {
			var b []byte
			b, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && string(b) != "ab" {
				err = fmt.Errorf("body %q, want ab", b)
			}
		}
		done <- err
	}
	for range 2 {
		tr := &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: srv.Addr("http")}), DisableKeepAlives: true}
		t.Cleanup(tr.CloseIdleConnections)
		go get(&http.Client{Transport: tr, Timeout: 30 * time.Second}) // owner: the test; ends with its request (done)
	}
	d, err := proxy.SOCKS5("tcp", srv.Addr("socks5"), nil, &net.Dialer{})
	if err != nil {
		t.Fatal(err)
	}
	str := &http.Transport{DialContext: d.(proxy.ContextDialer).DialContext, DisableKeepAlives: true}
	t.Cleanup(str.CloseIdleConnections)
	go get(&http.Client{Transport: str, Timeout: 30 * time.Second}) // owner: the test; ends with its request (done)
	for range 3 {
		<-rt.heads // each request reached the target and holds its upstream
	}
	released := false
	t.Cleanup(func() {
		if !released {
			close(release)
		}
	})

	var st struct {
		Tunnels   int `json:"tunnels"`
		Requests  int `json:"requests_in_flight"`
		Upstreams []struct {
			Active int `json:"active"`
		} `json:"upstreams"`
	}
	// The SOCKS5 tunnel registers once its reply is sent: wait for it to
	// show (the target has its request, so it will), then compare.
	var body string
	eventuallyTrue(t, "the SOCKS5 tunnel counted", func() bool {
		_, _, body = doRequest(t, admin, "GET", "/api/status", "")
		return json.Unmarshal([]byte(body), &st) == nil && st.Tunnels == 1
	})
	active := 0
	for _, u := range st.Upstreams {
		active += u.Active
	}
	if st.Tunnels != 1 || st.Requests != 2 || active != 3 {
		t.Errorf("/api/status: tunnels %d, requests_in_flight %d, upstreams' active %d; want 1, 2 and 3:\n%s", st.Tunnels, st.Requests, active, body)
	}
	_, _, page := doRequest(t, admin, "GET", "/", "")
	if !strings.Contains(page, `<b>2</b><span>Requests in flight</span>`) {
		t.Errorf("status page lacks 2 requests in flight:\n%s", page)
	}
	_, _, metrics := doRequest(t, admin, "GET", "/metrics", "")
	for _, want := range []string{"\nrotor_requests_in_flight 2\n", "\nrotor_tunnels_open 1\n", "\nrotor_upstream_active{upstream=\"up\"} 3\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}

	close(release)
	released = true
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("download: %v", err)
		}
	}
	eventuallyTrue(t, "no request left in flight", func() bool {
		_, _, body = doRequest(t, admin, "GET", "/api/status", "")
		return json.Unmarshal([]byte(body), &st) == nil && st.Requests == 0 && st.Tunnels == 0
	})
}

// TestStatusWaitingRequestNotInFlight: a plain-HTTP request waiting for an
// eligible upstream is a waiting client, not a request in flight: it holds
// no upstream, so requests_in_flight stayed 1 while every upstream's
// active was 0, against the figures' documented sum.
func TestStatusWaitingRequestNotInFlight(t *testing.T) {
	srv, _ := startGateway(t, "[pool]\nwait_for_upstream = \"20s\"\n[[upstream]]\nurl = \"socks5://127.0.0.1:9\"\nname = \"off\"\ndisabled = true\n")
	admin := "http://" + srv.Addr("admin")
	c, err := net.Dial("tcp", srv.Addr("http"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET http://127.0.0.1:9/ HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n")
	eventuallyTrue(t, "the request waiting", func() bool { return srv.Pool().Waiting() == 1 })
	var st struct {
		Waiting  int `json:"waiting"`
		Requests int `json:"requests_in_flight"`
	}
	_, _, body := doRequest(t, admin, "GET", "/api/status", "")
	if json.Unmarshal([]byte(body), &st) != nil || st.Waiting != 1 || st.Requests != 0 {
		t.Errorf("/api/status while the request waits: %s; want waiting 1, requests_in_flight 0", body)
	}
	_, _, metrics := doRequest(t, admin, "GET", "/metrics", "")
	for _, want := range []string{"\nrotor_requests_in_flight 0\n", "\nrotor_waiting_clients 1\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", strings.TrimSpace(want))
		}
	}
}
