package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestUnknownTagsLoggedAtInfo: a client asking for tags no upstream
// carries (usually a typo) is still told at once, 503 unavailable naming
// the tags (SOCKS5 REP 1), and its line is at info like other refusals of
// what the client asked, with outcome unavailable; tags that exist but
// have nothing eligible stay a warning. Issue: the typo was a warning,
// written at once, one write each, so a client could fill the log.
func TestUnknownTagsLoggedAtInfo(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	other := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[pool]\nstart_eligible = true\nwait_for_upstream = \"200ms\"\n"+
		"[[upstream]]\nurl = \"direct://\"\nname = \"d1\"\ntags = [\"us\"]\n"+
		"[[upstream]]\nurl = \""+other.URL().String()+"\"\nname = \"d2\"\ntags = [\"de\"]\ndisabled = true\n")
	auth := "Proxy-Authorization: Basic " + basic("scraper-tag-nope", "pw") + "\r\n"
	for _, req := range []string{
		"GET " + target.URL("/ok") + " HTTP/1.1\r\nHost: " + target.Addr() + "\r\n" + auth + "\r\n",
		"CONNECT " + target.Addr() + " HTTP/1.1\r\nHost: " + target.Addr() + "\r\n" + auth + "\r\n",
	} {
		resp, err := httpAsk(t, srv.Addr("http"), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Rotor-Error") != "unavailable" ||
			!strings.Contains(bodyOf(resp), `no upstream has tags "nope"`) {
			t.Errorf("%q: %s %q, want 503 unavailable naming the tag", req, statusOf(resp), resp.Header.Get("X-Rotor-Error"))
		}
	}
	if rep, err := socksAsk(t, srv.Addr("socks5"), socksHello("scraper-tag-nope", "pw", target.Addr())); err != nil || rep != repGeneralFailure {
		t.Errorf("SOCKS5: rep %#x err %v, want %#x", rep, err, repGeneralFailure)
	}
	infoSummaryLines(t, logs, 3)
	for _, l := range summaryLines(logs) {
		if !strings.Contains(l, `"outcome":"unavailable"`) || !strings.Contains(l, `no upstream has tags`) {
			t.Errorf("line: %s", l)
		}
	}

	// A tag that exists, with nothing eligible: a warning, after the wait.
	before := len(summaryLines(logs))
	if rep, err := socksAsk(t, srv.Addr("socks5"), socksHello("scraper-tag-de", "pw", target.Addr())); err != nil || rep != repGeneralFailure {
		t.Errorf("SOCKS5 tag de: rep %#x err %v, want %#x", rep, err, repGeneralFailure)
	}
	var lines []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if lines = summaryLines(logs); len(lines) > before {
			break
		}
	}
	if len(lines) <= before || !strings.Contains(lines[before], `"level":"warn"`) || !strings.Contains(lines[before], `"outcome":"unavailable"`) {
		t.Errorf("tag de with nothing eligible: lines %q, want a warning with outcome unavailable", lines[before:])
	}
}
