package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestForbiddenDestinationText: a destination the direct upstream refuses
// by policy is explained to the client by its address and the rule, and
// no text, to the client, in the log line or in the probe's detail, names
// the internal class "none". Issue: the 403 read "rotor: the destination
// is not allowed (allow_private_destinations is off): all 1 attempts
// failed; upstream direct: target_connect: none: dial tcp …", the line
// had "class":"none", and the record's detail "target_connect: none: …".
func TestForbiddenDestinationText(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	srv, logs := startGateway(t, listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n")
	want := "rotor: the destination " + target.Addr() + " is not allowed (allow_private_destinations is off)"
	for _, req := range []string{
		"GET http://" + target.Addr() + "/ HTTP/1.1\r\nHost: " + target.Addr() + "\r\n\r\n",
		string(connectHello(target.Addr())),
	} {
		resp, err := httpAsk(t, srv.Addr("http"), req)
		if err != nil {
			t.Fatal(err)
		}
		if body := strings.TrimSpace(bodyOf(resp)); resp.StatusCode != http.StatusForbidden || body != want {
			t.Errorf("%q: %s %q, want 403 %q", req, statusOf(resp), body, want)
		}
	}
	if rep, err := socksAsk(t, srv.Addr("socks5"), socksHello("", "", target.Addr())); err != nil || rep != repNotAllowed {
		t.Errorf("SOCKS CONNECT: rep %#x err %v, want %#x", rep, err, repNotAllowed)
	}
	infoSummaryLines(t, logs, 3)
	for _, l := range summaryLines(logs) {
		if strings.Contains(l, "none") || strings.Contains(l, `"class"`) || strings.Contains(l, "all 1 attempts") {
			t.Errorf("line names the class none, or counts one attempt as all: %s", l)
		}
		if strings.Contains(l, `"method":"GET"`) && !strings.Contains(l, `"message":"request refused"`) {
			t.Errorf("a refused request not logged as refused: %s", l)
		}
	}
	if n := target.Requests(); n != 0 {
		t.Errorf("the target was reached %d times", n)
	}

	// The probe through the direct upstream meets the same refusal.
	probed, _ := startGateway(t, listenConf("")+probeConf(target)+"[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n")
	rec := probed.Pool().Lookup("direct").Record()
	var snap health.Snapshot
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if snap = probed.Tracker().Snapshot(rec); snap.State == health.Cooling {
			break
		}
	}
	if snap.State != health.Cooling || !strings.Contains(snap.Detail, "destination forbidden by policy") || strings.Contains(snap.Detail, "none") {
		t.Errorf("after the refused probe: %v, detail %q; want cooling, the refusal without \"none\"", snap.State, snap.Detail)
	}
}

// TestForwardRefusalsLoggedAsRefused: a plain-HTTP request refused before
// any upstream (rotor itself, port 0, a host that is no host) is logged
// "request refused", with the fields of "request forwarded". Issue:
// nothing was forwarded and the line said "request forwarded".
func TestForwardRefusalsLoggedAsRefused(t *testing.T) {
	srv, logs := startGateway(t, "allow_private_destinations = true\n"+listenConf("")+
		"[pool]\nstart_eligible = true\n[[upstream]]\nurl = \"direct://\"\nname = \"direct\"\n")
	admin := srv.Addr("admin")
	for _, target := range []string{admin, "127.0.0.1:0", "0x7f000001"} {
		req := fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		if resp, err := httpAsk(t, srv.Addr("http"), req); err != nil || resp.StatusCode < 400 {
			t.Errorf("%s: %s err %v, want a refusal", target, statusOf(resp), err)
		}
	}
	infoSummaryLines(t, logs, 3)
	for _, l := range summaryLines(logs) {
		for _, want := range []string{`"message":"request refused"`, `"outcome":"failed"`, `"method":"GET"`, `"attempts":0`} {
			if !strings.Contains(l, want) {
				t.Errorf("line without %s: %s", want, l)
			}
		}
	}
}

// TestExplainForbiddenSelf: a destination the direct upstream refused
// because it resolved to rotor's own listener is explained as such, not
// as allow_private_destinations (which may well be on).
func TestExplainForbiddenSelf(t *testing.T) {
	f := &health.Failure{Class: health.ClassNone, Stage: health.StageTargetConnect, Target: "alias.example:9090",
		Err: fmt.Errorf("dial tcp 127.0.0.1:9090: %w: 127.0.0.1:9090: %w", upstream.ErrDestinationForbidden, errSelfTarget)}
	err := &upstream.AttemptsError{Attempts: []upstream.Attempt{{Upstream: "direct", Failure: f}}}
	if cf := explain(err); cf.Status != http.StatusForbidden || cf.Header != "forbidden" || cf.Reason != errSelfTarget.Error() {
		t.Errorf("self: %+v", cf)
	}
	f.Err = fmt.Errorf("dial tcp 10.0.0.1:80: %w: 10.0.0.1:80: %w", upstream.ErrDestinationForbidden, errors.New("not a public address"))
	f.Target = "intranet.example:80"
	if cf := explain(err); cf.Reason != "rotor: the destination intranet.example:80 is not allowed (allow_private_destinations is off)" {
		t.Errorf("private: %+v", cf)
	}
}
