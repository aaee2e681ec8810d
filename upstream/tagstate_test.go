package upstream

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestTypoTagsTakeNoTagState: tag sets no upstream carries (a typo loop,
// scraper-tag-bogus1, bogus2, …) neither use up the per-tag-set
// round-robin turns nor the views, so tag sets that exist later still get
// their equal shares. Issue: each unmatched tag set took one of the 4096
// round-robin cursors for good (p.pick ran before Next found that no
// upstream had the tags; the cursors outlived reloads), and after 4200
// such requests and a reload adding tags e and f, alternating e and f
// shared the untagged cursor: e {ms1: 60}, f {ms4: 60} instead of 30/30.
func TestTypoTagsTakeNoTagState(t *testing.T) {
	sp := specs("ms1", "ms2", "ms3", "ms4")
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, sp...)
	typos := func() {
		t.Helper()
		before := tp.set.Load().nviews.Load()
		for i := range 4200 {
			_, err := tp.NewAttempts(Request{Addr: "example.com:443", Tags: []string{fmt.Sprint("bogus", i)}}).Next(t.Context())
			var ne *NoEligibleError
			if !errors.As(err, &ne) || ne.Matching != 0 {
				t.Fatalf("bogus%d: %v, want no upstream has tags", i, err)
			}
		}
		if n := tp.set.Load().nviews.Load(); n != before {
			t.Errorf("%d views kept for tag sets no upstream has, want none", n-before)
		}
	}
	typos()
	sp[0].Tags, sp[1].Tags = []string{"e"}, []string{"e"}
	sp[2].Tags, sp[3].Tags = []string{"f"}, []string{"f"}
	if _, _, err := tp.Update(sp); err != nil {
		t.Fatal(err)
	}
	alternate := func(when string) {
		t.Helper()
		got := map[string]map[string]int{"e": {}, "f": {}}
		for i := range 120 {
			tag := []string{"e", "f"}[i%2]
			got[tag][tp.use(t, Request{Addr: "example.com:443", Tags: []string{tag}})]++
		}
		want := map[string]map[string]int{"e": {"ms1": 30, "ms2": 30}, "f": {"ms3": 30, "ms4": 30}}
		for tag, w := range want {
			for name, n := range w {
				if got[tag][name] != n {
					t.Errorf("%s: tag %s: picks %v, want %v", when, tag, got[tag], w)
					break
				}
			}
		}
	}
	alternate("after a reload")
	// Typos again, now that e and f exist: their turns are unaffected.
	typos()
	alternate("after more typos")
}
