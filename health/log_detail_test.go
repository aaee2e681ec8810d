package health

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestLogDetailWithoutError: a state-change line with no error carries
// the history entry's detail, which says why ("cooldown ended", "probe
// passed", an operator's reason); it was dropped, so a line "cooling →
// eligible, class refused, stage dial" read as one more refusal. A
// failure's line keeps its error alone (its detail is the same text).
func TestLogDetailWithoutError(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	w := zerolog.SyncWriter(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}))
	tr, clk := newFakeTracker(t, Config{StartEligible: true}) // no probe: a cooldown's end readmits
	tr.log = zerolog.New(w)
	r := tr.Add("socks5://10.0.0.1:1080", "dc-1", nil, false)
	tr.Fail(r, &Failure{Class: Refused, Stage: StageDial, Err: errors.New("connection refused")})
	clk.Advance(time.Hour)
	drive(t, tr)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	var lines []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2 (cooled, readmitted):\n%s", len(lines), out)
	}
	if _, ok := lines[0]["detail"]; ok || lines[0]["error"] != "connection refused" {
		t.Errorf("failure line %v: want its error and no detail", lines[0])
	}
	if d, _ := lines[1]["detail"].(string); lines[1]["to"] != "eligible" || !strings.HasPrefix(d, "cooldown ended") {
		t.Errorf("readmission line %v: want to eligible with detail \"cooldown ended…\"", lines[1])
	}
}
