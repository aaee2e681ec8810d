package upstream

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// TestTargetWaitDetailSaysTheClass: the detail of a silent answer to
// CONNECT says whose silence its class makes it. An http:// proxy that
// served no tunnel in the last minute is cooled as timeout at
// proxy_handshake: its detail said "no answer while the proxy reaches the
// target", blaming the target its class does not blame. One that served
// lately is target_timeout at target_connect: the target's wait.
func TestTargetWaitDetailSaysTheClass(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	for _, served := range []bool{false, true} {
		t.Run("served lately="+strconv.FormatBool(served), func(t *testing.T) {
			fk := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{})
			p, tr := dialPool(t, 200*time.Millisecond, fakeSpec("http", fk))
			if served {
				l, err := p.Dial(context.Background(), Request{Addr: target.Addr()})
				if err != nil {
					t.Fatal(err)
				}
				l.Conn.Close()
				l.Done()
			}
			fk.SetMode(upstreamtest.Mode{Fault: upstreamtest.HangConnect})
			_, err := p.Dial(context.Background(), Request{Addr: target.Addr()})
			_, f := lastFailure(t, err)
			detail := f.Err.Error()
			wantClass, wantStage := health.Timeout, health.StageProxyHandshake
			want, notWant := "the proxy did not answer CONNECT", "reaches the target"
			if served {
				wantClass, wantStage = health.TargetTimeout, health.StageTargetConnect
				want, notWant = "no answer while the proxy reaches the target", "did not answer"
			}
			if f.Class != wantClass || f.Stage != wantStage {
				t.Fatalf("failure %s/%s, want %s/%s (%v)", f.Class, f.Stage, wantClass, wantStage, err)
			}
			if !strings.Contains(detail, want) || strings.Contains(detail, notWant) {
				t.Errorf("%s/%s detail %q, want it to say %q", f.Class, f.Stage, detail, want)
			}
			if served {
				return // not recorded: a target failure does not cool
			}
			s := snapshot(t, p, tr, "http")
			if s.Reason != health.Timeout || !strings.Contains(s.Detail, want) || strings.Contains(s.Detail, notWant) {
				t.Errorf("record %v/%v detail %q, want timeout saying %q", s.Reason, s.Stage, s.Detail, want)
			}
		})
	}
}
