package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// The write path: the sync loop, Redis health checks, writing queued
// transitions, and re-reading (reconciling) the shared records.

// syncLoop writes queued transitions and releases, checks Redis every
// second (logging an outage once and reconciling when it ends or Redis
// restarted empty) and re-reads every record every Resync.
func (c *Cluster) syncLoop() {
	defer c.wg.Done()
	tk := time.NewTicker(time.Second)
	defer tk.Stop()
	var lastSync time.Time
	tick := func() {
		if !c.check() {
			return
		}
		c.heartbeat()
		if time.Since(lastSync) >= c.cfg.Resync {
			c.reconcile(false)
			lastSync = time.Now()
		}
		c.flush()
		if c.pool != nil {
			c.pool.RefreshSessions() // sessions held here keep their shared TTL
		}
		c.flushSessions()
		c.recheckDue()
	}
	tick()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
			if c.connected.Load() {
				c.flush()
				c.flushSessions()
				c.recheckDue()
			}
		case <-tk.C:
			tick()
		}
	}
}

// check pings Redis through its generation key: a random value set once
// per Redis lifetime, so that a Redis restarted empty (versions start
// over) is noticed even when no command failed. It returns true when Redis
// answered; a return from an outage or a new generation forgets the
// versions seen and reconciles at once.
func (c *Cluster) check() bool {
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	defer cancel()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	_ = c.rdb.SetNX(ctx, c.genKey, hex.EncodeToString(rnd[:]), 0).Err()
	gen, err := c.rdb.Get(ctx, c.genKey).Result()
	if err != nil {
		c.setDown(err)
		return false
	}
	c.mu.Lock()
	again := gen != c.gen || c.down || !c.connected.Load()
	c.mu.Unlock()
	if again {
		// The fleet's fingerprint key, before any write (a Redis that
		// restarted empty gets it back from the first instance to see it).
		if err := c.loadCredKey(ctx); err != nil {
			c.setDown(err)
			return false
		}
	}
	c.mu.Lock()
	fresh := gen != c.gen || c.down || !c.connected.Load()
	// A new generation after one seen before: Redis restarted empty or
	// was flushed, and every record this instance knows is put back.
	lost := c.gen != "" && gen != c.gen
	wasDown := c.down
	first := !c.joined
	c.joined = true
	if gen != c.gen {
		c.seen, c.sums = map[string]int64{}, map[string]uint64{}
		c.gen = gen
	}
	if fresh {
		c.freshAt = time.Now()
	}
	c.down = false
	c.mu.Unlock()
	c.connected.Store(true)
	if fresh {
		switch {
		case wasDown && first:
			// Started during an outage: no return, a first contact.
			c.log.Info().Msg("redis reachable: joining the fleet view")
		case wasDown:
			c.log.Info().Msg("redis reachable again: reconciling the fleet view")
		}
		if lost {
			c.log.Warn().Msg("redis lost the fleet's records (restarted empty?): putting back what this instance knows")
			// The sessions too, in the background: a big table must not
			// hold up the heartbeat and the records.
			c.putBackDue.Store(true)
		}
		c.flush()
		c.reconcile(lost)
		c.loadSessionsAsync()
	}
	return true
}

// flush writes the queued transitions, then releases the queued leases
// (in that order, so that no instance takes a released lease before the
// probe's outcome is in the shared record). A write that fails stays
// queued unless a newer local transition replaced it.
func (c *Cluster) flush() {
	c.mu.Lock()
	batch := c.pending
	c.pending = map[string][]health.RemoteState{}
	for key := range batch {
		c.writing[key] = true
	}
	rel := c.releases
	c.releases = nil
	c.mu.Unlock()
	failed := false
	for key, q := range batch {
		for i, rs := range q {
			if failed {
				c.requeue(key, q[i:])
				break
			}
			if err := c.write(rs); err != nil {
				failed = true
				c.requeue(key, q[i:])
				c.setDown(err)
			}
		}
		c.unheld(key)
	}
	if failed {
		return // the leases expire on their own
	}
	for _, lk := range rel {
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		_, _ = releaseScript.Run(ctx, c.rdb, []string{lk}, c.tok).Result()
		cancel()
	}
}

// requeue puts back the transitions q of key whose write failed, before
// any queued since.
func (c *Cluster) requeue(key string, q []health.RemoteState) {
	c.mu.Lock()
	var all []health.RemoteState
	for _, rs := range append(append([]health.RemoteState(nil), q...), c.pending[key]...) {
		all = queue(all, rs)
	}
	c.pending[key] = all
	c.mu.Unlock()
}

// write runs writeScript for one transition. When the stored record was
// newer, it is applied locally instead.
func (c *Cluster) write(rs health.RemoteState) error {
	nr := newRecord(rs, c.cfg.Instance, c.tok)
	if !operatorAction(rs.State, rs.Stage) {
		// Every automatic transition says with which credentials it was
		// made: an instance whose own were rejected does not take another
		// instance's passed probe for its own (keepsOwnCred).
		nr.Cred = c.credOf(rs.Key)
	}
	if nr.OpAt == 0 {
		// An automatic transition carries the newest operator action
		// this instance knows, so that a store that lost it (restored
		// from an older snapshot) does not hold an older disable over it.
		c.mu.Lock()
		op := c.ops[rs.Key]
		c.mu.Unlock()
		nr.OpAt, nr.OpInst = op.at, op.inst
	}
	b, err := json.Marshal(nr)
	if err != nil {
		return nil // cannot happen: plain fields
	}
	c.mu.Lock()
	minv := c.seen[rs.Key]
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	defer cancel()
	res, err := writeScript.Run(ctx, c.rdb, []string{c.recPrefix + rs.Key, c.channel}, string(b), c.cfg.History,
		c.cfg.MaxClockSkew.Milliseconds(), minv).Slice()
	if err != nil {
		return err
	}
	if len(res) != 2 {
		return errors.New("cluster: unexpected script result")
	}
	applied, _ := res[0].(int64)
	out, _ := res[1].(string)
	rec, err := decodeRecord(out)
	if err != nil {
		return nil
	}
	if applied == 1 {
		c.applied(rec)
		return nil
	}
	c.consider(rec, true)
	return nil
}

// applied notes rec, the result of this instance's write that won.
func (c *Cluster) applied(rec record) {
	c.mu.Lock()
	if rec.V >= c.seen[rec.Key] {
		c.seen[rec.Key], c.sums[rec.Key] = rec.V, rec.sum()
	}
	c.noteOp(rec)
	c.mu.Unlock()
	// The shared history now holds this transition among the others':
	// list the same one here as on every instance.
	if shared, ok := c.remote(rec); ok {
		c.tr.SetHistory(rec.Key, shared.History, c.cfg.History)
	}
}

// reconcile reads the shared record of every local upstream (reconcileKeys).
func (c *Cluster) reconcile(all bool) {
	rs := c.tr.Records()
	keys := make([]string, len(rs))
	for i, r := range rs {
		keys[i] = r.Key()
	}
	c.reconcileKeys(keys, all)
}

// recheckDue re-reads the records consider found lost or rolled back.
func (c *Cluster) recheckDue() {
	c.mu.Lock()
	keys := make([]string, 0, len(c.recheck))
	for k := range c.recheck {
		keys = append(keys, k)
	}
	c.recheck = map[string]bool{}
	c.mu.Unlock()
	if len(keys) > 0 {
		c.reconcileKeys(keys, false)
	}
}

// reconcileKeys reads the shared records of keys and applies the ones
// newer than what this instance has seen. A record Redis lacks, or holds
// with a version older than one seen (a Redis restored from an older
// snapshot) or with the version seen and other content (a transition
// written over a lost or rolled-back record by an instance that had not
// seen the newer one), is put back from what this instance knows (seed),
// above the version seen; with all (Redis restarted empty) every record
// is, so that an operator's disable is not lost to a state another
// instance wrote first into the empty Redis.
func (c *Cluster) reconcileKeys(all []string, everyRecord bool) {
	const chunk = 500
	for i := 0; i < len(all); i += chunk {
		part := all[i:min(i+chunk, len(all))]
		keys := make([]string, len(part))
		for j, k := range part {
			keys[j] = c.recPrefix + k
		}
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		vals, err := c.rdb.MGet(ctx, keys...).Result()
		cancel()
		if err != nil {
			c.setDown(err)
			return
		}
		var lost []seedItem
		for j, v := range vals {
			key := part[j]
			s, ok := v.(string)
			if !ok {
				lost = append(lost, seedItem{key: key})
				continue
			}
			rec, err := decodeRecord(s)
			if err != nil || rec.Key != key {
				continue
			}
			c.mu.Lock()
			sum, known := c.sums[key]
			back := rec.V < c.seen[key] || rec.V == c.seen[key] && known && rec.sum() != sum
			c.mu.Unlock()
			if everyRecord || back {
				lost = append(lost, seedItem{key: key, stored: &rec})
				continue
			}
			c.consider(rec, false)
		}
		if err := c.seed(lost); err != nil {
			c.setDown(err)
			return
		}
	}
}

// Reconcile asks the sync loop to re-read every record soon (after a
// config reload added upstreams).
func (c *Cluster) Reconcile() {
	c.mu.Lock()
	c.gen = "" // forces a reconcile at the next check
	c.mu.Unlock()
	c.wake()
}
