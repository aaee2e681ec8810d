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

// TestTagViewsReclaimed: views (and with them round-robin turns) of tag
// sets no longer asked for are reclaimed, so a tag set first asked for
// after a client went through thousands of others (tags that exist: an
// upstream may carry many, and they combine) gets its own turn. Without
// reclaiming, the first maxTagViews tag sets kept theirs until the next
// reload, and a later one shared the untagged cursor with the rest:
// alternating with the one-off tag sets, it got the same upstream every
// time.
func TestTagViewsReclaimed(t *testing.T) {
	const oneOff = maxTagViews + 2000
	tags := make([]string, oneOff, oneOff+1)
	for i := range tags {
		tags[i] = fmt.Sprint("u", i)
	}
	tags = append(tags, "late")
	sp := specs("e0", "e1", "e2")
	sp[0].Tags, sp[1].Tags = tags, tags
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin", WaitForUpstream: time.Millisecond}, nil, sp...)
	for i := range maxTagViews {
		tp.use(t, Request{Addr: "example.com:443", Tags: []string{tags[i]}})
	}
	late := map[string]int{}
	for i := maxTagViews; i < oneOff; i++ {
		tp.use(t, Request{Addr: "example.com:443", Tags: []string{tags[i]}})
		n := tp.use(t, Request{Addr: "example.com:443", Tags: []string{"late"}})
		if i >= oneOff-200 {
			late[n]++
		}
	}
	if late["e0"] != 100 || late["e1"] != 100 {
		t.Errorf("late tag set, alternating with one-off ones: picks %v, want e0 and e1 100 each", late)
	}
	if n := tp.set.Load().nviews.Load(); n > maxTagViews {
		t.Errorf("%d views kept, want at most %d", n, maxTagViews)
	}
}

// TestTagViewsSweepConcurrent: lookups and sweeps from several goroutines
// at once keep the view counts exact (run with -race).
func TestTagViewsSweepConcurrent(t *testing.T) {
	tags := make([]string, 3*maxTagViews)
	for i := range tags {
		tags[i] = fmt.Sprint("u", i)
	}
	sp := specs("e0", "e1")
	sp[0].Tags = tags
	tp := newTestPool(t, PoolConfig{WaitForUpstream: time.Millisecond}, nil, sp...)
	s := tp.set.Load()
	done := make(chan struct{})
	for g := range 4 {
		go func() { // owner: the test; ends after its lookups
			defer func() { done <- struct{}{} }()
			for i := range 2 * maxTagViews {
				tag := tags[(g*maxTagViews/2+i)%len(tags)]
				if i%3 == 0 {
					tag = "u0" // one tag set in constant use
				}
				if v := s.viewOf(tp.NewAttempts(Request{Addr: "example.com:443", Tags: []string{tag}})); len(v.idx) != 1 {
					t.Errorf("view of %s lists %d endpoints, want 1", tag, len(v.idx))
					return
				}
			}
		}()
	}
	for range 4 {
		<-done
	}
	var n, cost int64
	s.views.Range(func(_, x any) bool {
		n++
		cost += int64(len(x.(*view).idx))
		return true
	})
	// The bound is checked before a view is stored: lookups racing at
	// the bound may each store one.
	if n != s.nviews.Load() || cost != s.viewCost.Load() || n > maxTagViews+4 {
		t.Errorf("%d views listing %d members kept; counted %d and %d (bound %d)", n, cost, s.nviews.Load(), s.viewCost.Load(), maxTagViews)
	}
	if x, ok := s.views.Load("u0"); !ok || !x.(*view).kept {
		t.Error("the tag set in constant use lost its view")
	}
}
