package health

import (
	"slices"
	"strings"
	"time"
)

// Removed is what the tracker keeps of an upstream that left the config
// (Remove) for goneKeep, in a form a state file can carry across a
// restart: an upstream back in the config within goneKeep of At gets its
// record back (Add), even in the next process (RestoreRemoved).
type Removed struct {
	// Snapshot is the record as it was when the upstream left.
	Snapshot Snapshot
	// ConfigDisabled is whether the config had disabled it then (the
	// config, not an operator, has the last word on such a disable).
	ConfigDisabled bool
	// At is the wall-clock time it left the config.
	At time.Time
}

// ExportRemoved returns the removed records still kept (less than
// goneKeep since their removal), sorted by key, for the state file. At
// most goneMax.
func (t *Tracker) ExportRemoved() []Removed {
	now := t.clock.Now()
	t.mu.RLock()
	out := make([]Removed, 0, len(t.gone))
	for _, g := range t.gone {
		if now.Sub(g.at) < goneKeep {
			out = append(out, Removed{Snapshot: g.snap, ConfigDisabled: g.configDisabled, At: wall(g.at)})
		}
	}
	t.mu.RUnlock()
	slices.SortFunc(out, func(a, b Removed) int { return strings.Compare(a.Snapshot.Key, b.Snapshot.Key) })
	return out
}

// RestoreRemoved takes back a removed record that a state file kept
// across a restart (ExportRemoved of the previous process) and reports
// whether it did. A record removed goneKeep or more ago (wall clock) is
// dropped. When the upstream is configured again (a record for its key
// exists), that record gets it back as Add gives an upstream back in the
// config its record, except that an eligible one is probed first, as
// after any restart (Restore); the config has the last word on disabled.
// Otherwise it joins the removed set for what is left of its goneKeep,
// within goneMax, so that an upstream re-added later gets it back.
// Call it for keys the state file holds no live record of: that one wins.
func (t *Tracker) RestoreRemoved(rm Removed) bool {
	key := rm.Snapshot.Key
	if key == "" || rm.At.IsZero() {
		return false
	}
	now := t.clock.Now()
	age := max(wall(now).Sub(rm.At), 0) // a clock set back: removed just now
	if age >= goneKeep {
		return false
	}
	g := goneRecord{snap: rm.Snapshot, configDisabled: rm.ConfigDisabled, at: now.Add(-age), restarted: true}
	if r := t.Lookup(key); r != nil {
		r.mu.Lock()
		disabled := r.configDisabled
		r.mu.Unlock()
		t.revive(r, g, disabled)
		return true
	}
	t.remember(key, g)
	t.version.Add(1)
	return true
}
