package gateway

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestAllFailedReasonSaysWhatAndWhatToDo: a client whose attempts all
// failed on the upstreams is told, in words, what the last one met and
// what it can do. Issue: "every attempt failed (1); last: upstream gone:
// refused at dial" named a class and stage only, and "(1)" read as an
// error number.
func TestAllFailedReasonSaysWhatAndWhatToDo(t *testing.T) {
	srv, _ := startGateway(t, "[pool]\nstart_eligible = true\nmax_attempts = 1\nwait_for_upstream = \"10ms\"\n"+
		"[[upstream]]\nurl = \"socks5://"+upstreamtest.ClosedPort(t)+"\"\nname = \"gone\"\n")
	resp, err := httpAsk(t, srv.Addr("http"), string(connectHello("127.0.0.1:9")))
	if err != nil {
		t.Fatal(err)
	}
	want := "the attempt failed on upstream gone itself: refused at dial (the proxy refused rotor's connection); " +
		"retry later: rotor cools an upstream that fails and picks another"
	if body := strings.TrimSpace(bodyOf(resp)); resp.StatusCode != http.StatusBadGateway || body != want {
		t.Errorf("CONNECT: %d %q\nwant     502 %q", resp.StatusCode, body, want)
	}
	if got := resp.Header.Get("X-Rotor-Error"); got != "refused; stage=dial; upstream=gone" {
		t.Errorf("X-Rotor-Error %q", got)
	}
}

// TestExplainUpstreamFailureTexts pins the reasons of failures on the
// upstreams themselves and of an expired wait: each says what happened
// and what the client can do.
func TestExplainUpstreamFailureTexts(t *testing.T) {
	att := func(waited bool, fs ...*health.Failure) error {
		ae := &upstream.AttemptsError{Waited: waited}
		for i, f := range fs {
			ae.Attempts = append(ae.Attempts, upstream.Attempt{Upstream: fmt.Sprintf("up%d", i+1), Failure: f})
		}
		return ae
	}
	classify := func(err error) *health.Failure { return upstream.Classify(err, health.StageProxyHandshake) }
	authFail := &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth}
	timeout := &health.Failure{Class: health.Timeout, Stage: health.StageProxyHandshake}
	const retry = "; retry later: rotor cools an upstream that fails and picks another"
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"three failed", att(false, timeout, timeout, authFail),
			"all 3 attempts failed on the upstreams themselves; the last, upstream up3: auth_rejected at proxy_auth (the proxy rejected rotor's credentials for it)" + retry},
		{"failed then waited", att(true, timeout),
			"the attempt failed on upstream up1 itself: timeout at proxy_handshake (the proxy did not answer in time); no other upstream became eligible within pool.wait_for_upstream" + retry},
		{"address type", att(false, classify(&upstream.ReplyError{Code: 8})),
			"upstream up1 cannot reach this address type (an IPv6 target through an IPv4-only proxy); send a host name or an IPv4 address instead"},
		{"general failure", att(false, timeout, classify(&upstream.ReplyError{Code: 1})),
			"all 2 attempts failed; the last, upstream up2, answered general failure (SOCKS5 reply 1) for this destination, as small SOCKS5 servers do for a name that does not resolve or a connect that failed; check the target's name and port"},
		{"policy", att(false, classify(&upstream.ReplyError{Code: 2})),
			"upstream up1 refuses this destination by its policy (proxies often allow CONNECT to port 443 only); use a port the upstreams allow, or ask their operator to allow this one"},
		{"tags nobody has", &upstream.NoEligibleError{Tags: []string{"US"}},
			`no eligible upstream: no upstream has tags "US"; check the tag-<tag> parameters of the proxy username (tags match exactly)`},
		{"waited", &upstream.NoEligibleError{Matching: 3, Wait: 10 * time.Second},
			"no upstream proxy became eligible (waited pool.wait_for_upstream, 10s); retry later"},
		{"all disabled", &upstream.NoEligibleError{Matching: 2, Disabled: 2, Wait: time.Second},
			"no eligible upstream: 2 disabled (waited pool.wait_for_upstream, 1s); retrying will not help until an operator enables one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := explain(tt.err).Reason; got != tt.want {
				t.Errorf("reason %q\nwant   %q", got, tt.want)
			}
		})
	}
}

// TestClientAuthReasonSaysWhatToDo: the 407 says whether credentials
// were missing or wrong (never which part, nor which users exist), and
// what to send. Issue: both read a bare "proxy authentication required".
func TestClientAuthReasonSaysWhatToDo(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv, _ := startGateway(t, "allow_private_destinations = true\n[[client]]\nusername = \"scraper\"\npassword = \"s3cret\"\n"+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\n")
	basic := "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("scraper:nope")) + "\r\n"
	for _, tc := range []struct{ header, want string }{
		{"", "proxy authentication required: no username was sent; send the username and password rotor's operator gave you (Proxy-Authorization: Basic)"},
		{basic, "proxy authentication required: the username or password is incorrect"},
	} {
		resp, err := httpAsk(t, srv.Addr("http"), "CONNECT "+target.Addr()+" HTTP/1.1\r\nHost: "+target.Addr()+"\r\n"+tc.header+"\r\n")
		if err != nil {
			t.Fatal(err)
		}
		if body := strings.TrimSpace(bodyOf(resp)); resp.StatusCode != http.StatusProxyAuthRequired || body != tc.want {
			t.Errorf("%q: %d %q\nwant %q", tc.header, resp.StatusCode, body, tc.want)
		}
	}
}
