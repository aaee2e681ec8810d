package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestSessionRetriedAnswerMovesOnlyWhereServed: an answer held back for
// pool.retry_statuses (the gateway calls HoldAnswer, then Answered or
// Succeeded) binds the session only when it is the answer the client
// gets, so "session moved" is logged only when the session's exit really
// changes, once, from the upstream that last served it to the one whose
// answer the client got. Bug: a new session whose first answer (a 429)
// was retried logged a move from the upstream whose answer the client
// never saw, and each further retried answer logged one more move.
func TestSessionRetriedAnswerMovesOnlyWhereServed(t *testing.T) {
	refused := &health.Failure{Class: health.Refused, Stage: health.StageDial, Err: errors.New("connection refused")}
	// Each step is one attempt of the request: "held" its answer is held
	// back for retry, "ok" the client gets its answer, "fail" it fails.
	for _, tc := range []struct {
		name      string
		confirmed bool     // the session served from its first upstream before
		steps     []string // one per attempt
		wantAt    int      // index of the attempt the session ends on
		wantMoves int      // "session moved" lines for this request
	}{
		{"new session, 429 then 200", false, []string{"held", "ok"}, 1, 0},
		{"new session, 429 twice then 200", false, []string{"held", "held", "ok"}, 2, 0},
		{"new session, 429 then failures", false, []string{"held", "fail", "fail"}, 0, 0},
		{"bound session, 429 then 200", true, []string{"held", "ok"}, 1, 1},
		{"bound session, 429 twice then 200", true, []string{"held", "held", "ok"}, 2, 1},
		{"bound session, 429 then failures", true, []string{"held", "fail", "fail"}, 0, 0},
		{"bound session, only 429s", true, []string{"held", "held", "held"}, 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond, MaxAttempts: 3},
				nil, specs("a", "b", "c", "d")...)
			req := Request{Addr: "example.com:80", Session: "r1"}
			ctx := context.Background()
			if tc.confirmed {
				tp.use(t, req)
			}
			before := strings.Count(tp.logs.String(), "session moved")
			a := tp.NewAttempts(req)
			a.Replayable()
			var got []*Endpoint
			var held *Endpoint // the answer the caller keeps, as the gateway's last
			for i, step := range tc.steps {
				e, err := a.Next(ctx)
				if err != nil {
					t.Fatalf("attempt %d: %v", i, err)
				}
				got = append(got, e)
				switch step {
				case "held":
					a.HoldAnswer(e)
					a.Answered(e)
					if held != nil {
						a.Release(held) // superseded
					}
					held = e
				case "ok":
					a.Succeeded(e)
					if held != nil {
						a.Release(held)
						held = nil
					}
					a.Release(e)
				case "fail":
					if err := a.Failed(ctx, e, refused); err != nil {
						t.Fatalf("attempt %d: Failed: %v", i, err)
					}
				}
			}
			if held != nil {
				// No attempt left: the loop ends with an error, and the
				// client gets the answer held.
				if _, err := a.Next(ctx); err == nil {
					t.Fatal("Next after the last attempt succeeded")
				}
				a.Release(held)
			}
			want := got[tc.wantAt]
			if key := tp.SessionKey("r1"); key != want.Key {
				t.Errorf("session bound to %q, want %s (whose answer the client got)", key, want.Key)
			}
			logs := tp.logs.String()
			if n := strings.Count(logs, "session moved") - before; n != tc.wantMoves {
				t.Errorf("%d session moves logged, want %d:\n%s", n, tc.wantMoves, logs)
			}
			if tc.wantMoves == 1 {
				line := fmt.Sprintf(`"from":"%s","to":"%s"`, got[0].Name, want.Name)
				if !strings.Contains(logs, line) {
					t.Errorf("log lacks the move %s:\n%s", line, logs)
				}
			}
			if next := tp.use(t, req); next != want.Name {
				t.Errorf("the session's next request went to %s, want %s", next, want.Name)
			}
		})
	}
}
