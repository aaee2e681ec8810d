package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// openTaggedTunnel opens a CONNECT tunnel to addr through the HTTP front as
// user (tags go in the username) and returns it open, with the answer's
// status; the test closes it.
func openTaggedTunnel(t *testing.T, front, user, addr string) (net.Conn, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", addr, addr, basic(user, "x"))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", addr, err)
	}
	resp.Body.Close()
	return c, resp.StatusCode
}

// TestReloadRemovedAndBackKeepsActive: an upstream with max_conns = 1
// holding a tunnel, saved out of the config and back in (a config saved in
// two writes), still counts that tunnel: the admin API showed "active": 0
// and a second tunnel was admitted (2 open with max_conns = 1).
func TestReloadRemovedAndBackKeepsActive(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	a := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	b := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	head := "[pool]\nstart_eligible = true\nwait_for_upstream = \"300ms\"\n" +
		fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"b\"\n", b.URL().String())
	withA := head + fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"a\"\ntags = [\"a\"]\nmax_conns = 1\n", a.URL().String())
	srv, _ := startGateway(t, withA)
	listen := "\n[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n"
	reload := func(text string) {
		t.Helper()
		cfg, err := ParseConfig("test.toml", []byte(text+listen))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Reload(cfg); err != nil {
			t.Fatalf("Reload: %v", err)
		}
	}
	active := func() int64 {
		t.Helper()
		code, body := adminGet(t, srv, "/api/upstreams/a")
		var rec struct {
			State  string `json:"state"`
			Active int64  `json:"active"`
		}
		if err := json.Unmarshal([]byte(body), &rec); code != http.StatusOK || err != nil {
			t.Fatalf("GET /api/upstreams/a: %d %s (%v)", code, body, err)
		}
		if rec.State != "eligible" {
			t.Fatalf("a is %s, want eligible (its record back)", rec.State)
		}
		return rec.Active
	}

	first, code := openTaggedTunnel(t, srv.Addr("http"), "scraper-tag-a", target.Addr())
	if code != http.StatusOK {
		t.Fatalf("first tunnel: %d", code)
	}
	if got := active(); got != 1 {
		t.Fatalf("active = %d with one tunnel open", got)
	}
	reload(head)
	reload(withA)
	if got := active(); got != 1 {
		t.Errorf("after removing a and putting it back: active = %d with its tunnel open, want 1", got)
	}
	if _, code := openTaggedTunnel(t, srv.Addr("http"), "scraper-tag-a", target.Addr()); code != http.StatusServiceUnavailable {
		t.Errorf("second tunnel through a (max_conns = 1, one open): %d, want 503", code)
	}
	first.Close()
	eventuallyTrue(t, "the first tunnel's end counted", func() bool { return active() == 0 })
	if _, code := openTaggedTunnel(t, srv.Addr("http"), "scraper-tag-a", target.Addr()); code != http.StatusOK {
		t.Errorf("tunnel after the first one ended: %d, want 200", code)
	}
}
