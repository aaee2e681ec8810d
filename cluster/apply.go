package cluster

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// The read path: shared records arriving from Redis (messages, pulls,
// write results) and how they are applied to the local tracker.

// consider applies a shared record read from Redis (message, pull or
// write result) unless it is not newer than one already applied or
// written, or a local transition of the same upstream is waiting to be
// written (that write decides). One read while this instance's write of
// the upstream runs waits for its result (held): it may be older than the
// write, whose version is not known yet. force skips the version check.
// A record is never skipped for carrying this process's token: a put-back
// merge keeps the token of the state it kept, with other content, and a
// record this instance wrote must apply when its local state went astray.
// A record with the version seen but other content, or a message older
// than the version seen, means Redis lost or rolled back the record: the
// sync loop re-reads it at once and puts it back (reconcileKeys), at a
// version above every one seen, so that every instance applies the result.
func (c *Cluster) consider(rec record, force bool) { c.considerFrom(rec, force, false) }

// considerFrom is consider; msg marks a message from the subscription,
// which arrives in Redis's order (an older version than seen there is no
// late write result: Redis's version went back).
func (c *Cluster) considerFrom(rec record, force, msg bool) {
	c.applyMu.Lock()
	defer c.applyMu.Unlock()
	c.mu.Lock()
	c.noteOp(rec)
	if c.writing[rec.Key] {
		// A forced read (TryProbe's settled record) stays forced: it
		// must re-apply the version the write notes as seen.
		if h, ok := c.held[rec.Key]; !ok || rec.V > h.rec.V {
			c.held[rec.Key] = heldRecord{rec, force}
		} else if rec.V == h.rec.V && force {
			c.held[rec.Key] = heldRecord{h.rec, true}
		}
		c.mu.Unlock()
		return
	}
	// force re-applies the version seen (the local view may have gone
	// astray from it), never an older one: a write's answer can arrive
	// after a newer record was applied from the subscription, and
	// applying it then left the tracker on a stale state for good (every
	// later read of the newest version counted as seen).
	_, waiting := c.pending[rec.Key]
	seen := c.seen[rec.Key]
	if waiting {
		c.mu.Unlock()
		return
	}
	sum := rec.sum()
	if rec.V < seen || !force && rec.V == seen {
		sum0, known := c.sums[rec.Key]
		again := rec.V == seen && known && sum != sum0 || msg && rec.V < seen
		if again {
			c.recheck[rec.Key] = true
		}
		c.mu.Unlock()
		if again {
			c.wake()
		}
		return
	}
	c.seen[rec.Key], c.sums[rec.Key] = rec.V, sum
	c.mu.Unlock()
	rs, ok := c.remote(rec)
	if !ok {
		return
	}
	if c.foreignCred(rec) {
		// Another instance's credentials were rejected: this one keeps
		// its state, and lists the failure in the shared history.
		c.tr.SetHistory(rec.Key, rs.History, c.cfg.History)
		return
	}
	if c.keepsOwnCred(rec) {
		// This instance's credentials were rejected; rec is not about
		// them: it keeps its state, and lists rec in the shared history.
		c.logKept(rec)
		c.tr.SetHistory(rec.Key, rs.History, c.cfg.History)
		return
	}
	rs = c.clamp(rs)
	rs.HistoryBound = c.cfg.History
	c.tr.ApplyRemote(rec.Key, rs)
	c.noteAppliedCred(rec)
}

// unheld ends the write of key and considers the record read meanwhile,
// if any.
func (c *Cluster) unheld(key string) {
	c.mu.Lock()
	delete(c.writing, key)
	h, ok := c.held[key]
	delete(c.held, key)
	c.mu.Unlock()
	if ok {
		c.consider(h.rec, h.force)
	}
}

// heldRecord is a record read while this instance's write of the same
// upstream ran, with the force it was considered with.
type heldRecord struct {
	rec   record
	force bool
}

// noteOp keeps the newest operator action rec knows of. Caller holds mu.
func (c *Cluster) noteOp(rec record) {
	if s := (stamp{rec.OpAt, rec.OpInst}); s.at != 0 && s.after(c.ops[rec.Key]) {
		c.ops[rec.Key] = s
	}
}

// subscribe applies records published by other instances. go-redis
// re-subscribes by itself after a connection loss; record messages missed
// meanwhile are caught by the sync loop's reconcile, session bindings by a
// load of the stored sessions each time the session channel is subscribed
// again (a binding another instance pushed while this one's subscription
// was down would otherwise never arrive).
func (c *Cluster) subscribe() {
	defer c.wg.Done()
	ps := c.rdb.Subscribe(c.ctx, c.channel, c.sessChannel)
	defer ps.Close()
	// Wait (bounded) for the subscription, then load the stored sessions:
	// a binding published before the subscription started is not missed.
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	if _, err := ps.Receive(ctx); err == nil {
		c.loadSessionsAsync()
	}
	cancel()
	ch := ps.ChannelWithSubscriptions(redis.WithChannelHealthCheckInterval(time.Second))
	for {
		select {
		case <-c.ctx.Done():
			return
		case v, ok := <-ch:
			if !ok {
				return
			}
			var m *redis.Message
			switch v := v.(type) {
			case *redis.Subscription:
				if v.Kind == "subscribe" && v.Channel == c.sessChannel {
					c.loadSessionsAsync()
				}
				continue
			case *redis.Message:
				m = v
			default:
				continue
			}
			if m.Channel == c.sessChannel {
				c.applySession(m.Payload)
				continue
			}
			rec, err := decodeRecord(m.Payload)
			if err != nil || rec.Key == "" {
				c.log.Warn().Err(err).Msg("fleet: undecodable record ignored")
				continue
			}
			c.considerFrom(rec, false, true)
		}
	}
}
