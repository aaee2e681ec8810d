package gateway

import (
	"fmt"
	"testing"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestScraperSessionPerUser: sticky sessions are per client user. The
// same id under two [[client]] users names two sessions: rotor keyed
// them on the id alone, so bob-session-shared1 went out through the
// upstream scraper-session-shared1 was bound to, and one tenant could pin
// or move another's exit by reusing an id such as 1 or job_1.
func TestScraperSessionPerUser(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	names := []string{"m1", "m2", "m3"}
	ups := map[string]*upstreamtest.Server{}
	for _, n := range names {
		ups[n] = upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	}
	clients := "[[client]]\nusername = \"scraper\"\npassword = \"pw-scraper\"\n[[client]]\nusername = \"bob\"\npassword = \"pw-bob\"\n"
	srv, _ := startGateway(t, fmt.Sprintf("%s\n%s[pool]\nstart_eligible = true\nstrategy = \"round-robin\"\n%s",
		probeConf(target), clients, upstreamConf(names, ups, nil)))

	// via sends requests of user's session shared1 over every front and
	// returns the upstreams that served them.
	via := func(user, pass string) map[string]int {
		t.Helper()
		seen := map[string]int{}
		for i := range 3 {
			for _, tunnel := range []bool{false, true} {
				resp, err := httpGet(t, srv.Addr("http"), user+"-session-shared1", pass, target.URL("/ok"), tunnel)
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("%s request %d (tunnel=%v): %v %v", user, i, tunnel, resp, err)
				}
				seen[resp.Header.Get("X-Rotor-Upstream")]++
			}
		}
		before := tunnelCounts(ups)
		resp, err := socksGet(t, srv.Addr("socks5"), user+"-session-shared1", pass, target.URL("/ok"))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s over SOCKS5: %v %v", user, resp, err)
		}
		for n := range tunnelDeltas(ups, before) {
			seen[n]++
		}
		return seen
	}
	home := via("scraper", "pw-scraper")
	if len(home) != 1 {
		t.Fatalf("scraper's session served by %v, want one upstream", home)
	}
	bob := via("bob", "pw-bob")
	if len(bob) != 1 {
		t.Fatalf("bob's session served by %v, want one upstream", bob)
	}
	for n := range bob {
		if _, ok := home[n]; ok {
			t.Errorf("bob's session shared1 went to %s, where scraper's session shared1 is bound: sessions are shared across users", n)
		}
	}
	again := via("scraper", "pw-scraper")
	for n := range again {
		if _, ok := home[n]; !ok || len(again) != 1 {
			t.Errorf("scraper's session after bob's requests served by %v, before by %v", again, home)
		}
	}
}
