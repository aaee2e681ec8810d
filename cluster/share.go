package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shared limits and sticky sessions (issue 10). Neither ever waits on
// Redis on the data path:
//
//   - Limits: every process heartbeats its token ("<instance>/<random>")
//     into the sorted set "<prefix>:instances" (scored by Redis's own
//     clock, so no skew) and counts the members heard from within
//     instanceTTL. Two processes under one instance name are both counted,
//     and each warns about the other. The count N goes
//     to the pool (Pool.SetInstances), which enforces a static local share
//     of every endpoint's limits: ceil(max_conns/N) tunnels and rate/N new
//     tunnels per second. During an outage the last count stays in force.
//   - Sessions: a binding made here is queued (SessionBound) and written
//     by the sync loop: SET "<prefix>:sess:<id>" PX ttl, and published on
//     "<prefix>:sessions" so that every instance fills its local table.
//     The write is conditional (sessWriteScript): when the stored binding
//     is neither the new key nor the one it replaced, another instance
//     moved (or bound) the session meanwhile, and that binding stands and
//     is applied here instead, so that a refresh or a late answer never
//     undoes a move. Sessions held here (an open tunnel or forwarded
//     request) are refreshed every ttl/4 while held (Pool.RefreshSessions),
//     so that they do not expire in the fleet under a long use.
//     Lookups stay local. A starting or reconnecting instance loads the
//     stored sessions it does not hold yet, in the background. After a
//     new Redis generation (restarted empty, flushed) every instance puts
//     back the sessions it knows Redis held, with the TTL they had left,
//     unless an instance bound them anew meanwhile (SET NX).

// Pool is what the cluster needs from upstream.Pool for shared limits and
// sessions.
type Pool interface {
	SetInstances(n int)
	ApplySession(id, key string, left time.Duration, fill bool)
	// RefreshSessions reports the sessions held now whose shared TTL is
	// due for a refresh, through SessionBound (the sync loop calls it
	// every second).
	RefreshSessions()
}

const (
	// instanceTTL is how long an instance counts as live after its last
	// heartbeat (sent every second): an instance that died stops holding
	// a share of the limits after at most this.
	instanceTTL = 5 * time.Second
	// settleAfterConnect is how long after a (re)connection a lower
	// instance count is not believed: every live instance heartbeats once
	// a second, so by then each one reachable has been counted.
	settleAfterConnect = 3 * time.Second
	// maxPendingSessions bounds the session bindings queued while Redis is
	// slow or unreachable; beyond it new ones are dropped (they stay local,
	// and the next refresh, within ttl/4 of use, reports them again).
	maxPendingSessions = 10_000
	// maxLoadedSessions bounds the bulk load at start and reconnect (the
	// pool holds at most 100,000 sessions anyway), and the sessions known
	// for a put-back.
	maxLoadedSessions = 100_000
	// sessionBatch is how many session commands go in one pipeline (one
	// round trip, one opTimeout).
	sessionBatch = 1000
)

// sessBind is one session binding on its way to Redis and the fleet.
type sessBind struct {
	ID  string `json:"id"`
	Key string `json:"key"`
	TTL int64  `json:"ttl"` // milliseconds
	// From is the key the stored binding is to have for the write to
	// take (see sessWriteScript): Key for a refresh, the replaced key for
	// a move, "" for a new session. Not published.
	From string `json:"-"`
}

// sessKnown is a binding this instance knows Redis holds: written by it,
// published by another instance, or loaded.
type sessKnown struct {
	key   string
	until time.Time // when the key expires in Redis, as far as known
}

// SetPool links the cluster to the pool whose limits it divides and whose
// sessions it shares. Call it before Start.
func (c *Cluster) SetPool(p Pool) { c.pool = p }

// Instances returns the live instance count last read from Redis (1
// before the first heartbeat).
func (c *Cluster) Instances() int { return int(max(c.instances.Load(), 1)) }

// SessionBound queues a session binding for the fleet (upstream.Fleet).
// It never blocks. A binding queued for id already is replaced, and the
// replacement keeps the first one's from: the stored binding is still the
// one the first replaced, none of them having been written (a move and
// a move on at once read as the fleet's having moved it meanwhile).
func (c *Cluster) SessionBound(id, key, from string, ttl time.Duration) {
	c.sessMu.Lock()
	old, queued := c.sessPending[id]
	if !queued && len(c.sessPending) >= maxPendingSessions {
		c.sessMu.Unlock()
		return
	}
	if queued {
		from = old.From
	}
	c.sessPending[id] = sessBind{ID: id, Key: key, From: from, TTL: max(ttl.Milliseconds(), 1)}
	c.sessMu.Unlock()
	c.wake()
}

// sessWriteScript writes one session binding (KEYS[1], value ARGV[1], PX
// ARGV[2]) and publishes ARGV[4] on KEYS[2], unless the stored binding is
// another key than ARGV[1] and than ARGV[3] (the key it replaced, or
// ARGV[1] for a refresh): then another instance moved or bound the
// session since this one last heard, and its binding stands. Returns {1}
// when it wrote, else {0, the stored key, its PTTL in ms}.
var sessWriteScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] and v ~= ARGV[3] then
  return {0, v, redis.call('PTTL', KEYS[1])}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[4])
return {1}
`)

// heartbeatScript records member ARGV[1] (this process's token,
// "<instance>/<random>") as live now (Redis's clock, in ms), drops members
// silent for more than ARGV[2] ms, and returns {members left, other
// members under this instance's name (prefix ARGV[3]) that heartbeat after
// ARGV[4], ARGV[4]}. ARGV[4] is the time of this process's first
// heartbeat (0 before it: now). A member under the same name that has not
// heartbeaten since is a predecessor that died without leaving, not a
// live duplicate.
var heartbeatScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local prefix = ARGV[3]
local since = tonumber(ARGV[4])
if since == 0 then since = now end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
redis.call('PEXPIRE', KEYS[1], ttl * 2)
local dups = 0
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. since, '+inf')) do
  if m ~= ARGV[1] and string.sub(m, 1, #prefix) == prefix then dups = dups + 1 end
end
return {redis.call('ZCARD', KEYS[1]), dups, since}
`)

// dupRepeat is how often a duplicate instance name is warned about again
// while it lasts.
const dupRepeat = time.Minute

// heartbeat refreshes this process's membership, passes the live count to
// the pool when it changed, and warns when another live process
// heartbeats under this instance's name.
func (c *Cluster) heartbeat() {
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	res, err := heartbeatScript.Run(ctx, c.rdb, []string{c.instKey}, c.tok, c.instTTL.Milliseconds(),
		c.cfg.Instance+"/", c.beat.since).Int64Slice()
	cancel()
	if err == nil && len(res) != 3 {
		err = errors.New("cluster: unexpected heartbeat result")
	}
	if err != nil {
		c.setDown(err)
		return
	}
	n := max(res[0], 1)
	c.beat.since = res[2]
	c.noteDuplicates(int(res[1]))
	c.mu.Lock()
	settling := time.Since(c.freshAt) < min(c.instTTL, settleAfterConnect)
	c.mu.Unlock()
	old := c.instances.Load()
	if settling && n < old {
		// Just after a reconnect (or a Redis that restarted empty) the
		// others may not have heartbeaten yet: a lower count is not
		// believed until every live instance had the time to.
		return
	}
	if old != n {
		c.instances.Store(n)
		c.log.Info().Int64("instances", n).Msg("fleet: live instances share per-upstream limits")
	}
	if c.pool != nil {
		c.pool.SetInstances(int(n))
	}
}

// noteDuplicates logs that others (a count) live processes heartbeat
// under this instance's name: at once, then every dupRepeat while it
// lasts, and once when it ends. Each process is counted for the shared
// limits, so the shares stay right; but records, history and logs name
// the instance, and cannot tell the processes apart.
func (c *Cluster) noteDuplicates(others int) {
	now := time.Now()
	switch {
	case others > 0 && (!c.beat.dup || now.Sub(c.beat.logged) >= dupRepeat):
		c.beat.dup, c.beat.logged = true, now
		c.log.Warn().Int("others", others).
			Msg("fleet: another rotor process heartbeats under this instance name; give each instance its own [cluster] instance")
	case others == 0 && c.beat.dup:
		c.beat.dup = false
		c.log.Info().Msg("fleet: no other process heartbeats under this instance name any more")
	}
}

// leave removes this instance from the live set at shutdown, so the
// others take over its share at once rather than after instanceTTL.
func (c *Cluster) leave() {
	if !c.connected.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_ = c.rdb.ZRem(ctx, c.instKey, c.tok).Err()
}

// flushSessions writes the queued session bindings and publishes them, in
// one pipeline. On failure the batch is queued again (newer bindings of
// the same ids win).
func (c *Cluster) flushSessions() {
	c.sessMu.Lock()
	batch := c.sessPending
	if len(batch) == 0 {
		c.sessMu.Unlock()
		return
	}
	c.sessPending = map[string]sessBind{}
	c.sessMu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	defer cancel()
	sent := time.Now() // the keys expire no sooner than their TTL from now
	binds := make([]sessBind, 0, len(batch))
	cmds := make([]*redis.Cmd, 0, len(batch))
	err := sessWriteScript.Load(ctx, c.rdb).Err()
	if err == nil {
		_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, b := range batch {
				msg, _ := json.Marshal(b) // plain fields: cannot fail
				binds = append(binds, b)
				cmds = append(cmds, sessWriteScript.EvalSha(ctx, p, []string{c.sessPrefix + b.ID, c.sessChannel},
					b.Key, b.TTL, b.From, string(msg)))
			}
			return nil
		})
	}
	if err == nil {
		for i, b := range binds {
			c.sessWritten(b, cmds[i], sent)
		}
		return
	}
	c.setDown(err)
	c.sessMu.Lock()
	for id, b := range batch {
		if _, newer := c.sessPending[id]; !newer && len(c.sessPending) < maxPendingSessions {
			c.sessPending[id] = b
		}
	}
	c.sessMu.Unlock()
}

// sessWritten notes the outcome of b's write: written, or refused because
// another instance's binding stands, which is applied here then (the
// local table may not have heard of it: a message missed while
// unsubscribed).
func (c *Cluster) sessWritten(b sessBind, cmd *redis.Cmd, sent time.Time) {
	res, err := cmd.Slice()
	if err != nil || len(res) == 0 {
		return
	}
	if ok, _ := res[0].(int64); ok == 1 || len(res) < 3 {
		c.noteSession(b.ID, b.Key, sent.Add(time.Duration(b.TTL)*time.Millisecond), false)
		return
	}
	key, _ := res[1].(string)
	pttl, _ := res[2].(int64)
	if key == "" || pttl <= 0 {
		return // expired meanwhile: the next use binds it again
	}
	left := time.Duration(pttl) * time.Millisecond
	c.noteSession(b.ID, key, time.Now().Add(left), false)
	if c.pool != nil {
		c.pool.ApplySession(b.ID, key, left, false)
	}
}

// applySession applies a binding published by an instance, this one
// included: every instance applies the channel's messages in the one
// order Redis delivers them, so two instances binding the same new
// session at once end on the same upstream.
func (c *Cluster) applySession(payload string) {
	var b sessBind
	if err := json.Unmarshal([]byte(payload), &b); err != nil || b.ID == "" || b.Key == "" {
		c.log.Warn().Err(err).Msg("fleet: undecodable session message ignored")
		return
	}
	left := time.Duration(b.TTL) * time.Millisecond
	c.noteSession(b.ID, b.Key, time.Now().Add(left), true)
	if c.pool != nil {
		c.pool.ApplySession(b.ID, b.Key, left, false)
	}
}

// noteSession records that Redis holds session id bound to key until
// until. A published binding (ordered: messages arrive in Redis's order)
// replaces what is known of id; a write's or a load's note (not ordered:
// it may be taken after a message that follows it in Redis) replaces only
// a note that expires sooner. The table is bounded like the pool's: when it is full, expired
// entries are swept (at most once a second), then an arbitrary one is
// dropped, which only costs that session its put-back.
func (c *Cluster) noteSession(id, key string, until time.Time, ordered bool) {
	c.knownMu.Lock()
	defer c.knownMu.Unlock()
	old, ok := c.known[id]
	if ok && !ordered && !until.After(old.until) {
		return
	}
	if !ok && len(c.known) >= maxLoadedSessions {
		if now := time.Now(); now.Sub(c.knownSwept) >= time.Second {
			c.knownSwept = now
			for k, s := range c.known {
				if !s.until.After(now) {
					delete(c.known, k)
				}
			}
		}
		for k := range c.known {
			if len(c.known) < maxLoadedSessions {
				break
			}
			delete(c.known, k)
		}
	}
	c.known[id] = sessKnown{key: key, until: until}
}

// putBackScript puts back one session binding (KEYS[1], value ARGV[1],
// PX ARGV[2]) unless the key exists, that is unless an instance bound the
// session in the new Redis already (its binding is newer, and was
// published), and publishes ARGV[3] on KEYS[2] when it did, so that an
// instance which started after the restart learns of it. Returns 1 when
// it put the binding back.
var putBackScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('PUBLISH', KEYS[2], ARGV[3])
  return 1
end
return 0
`)

// putBackSessions puts the sessions this instance knows Redis held back
// into a Redis that lost them (a new generation), with the TTL each had
// left, sessionBatch to a pipeline. Bindings queued for writing are left
// to flushSessions (they are newer). It reports whether every batch went
// through; a put-back that did not is done again at the next reconnect
// (putBackScript leaves alone what the first one put back).
func (c *Cluster) putBackSessions() bool {
	now := time.Now()
	var todo []sessBind
	c.knownMu.Lock()
	for id, s := range c.known {
		left := s.until.Sub(now).Milliseconds()
		if left <= 0 {
			delete(c.known, id)
			continue
		}
		todo = append(todo, sessBind{ID: id, Key: s.key, TTL: left})
	}
	c.knownMu.Unlock()
	if len(todo) == 0 {
		return true
	}
	c.sessMu.Lock()
	kept := todo[:0]
	for _, b := range todo {
		if _, queued := c.sessPending[b.ID]; !queued {
			kept = append(kept, b)
		}
	}
	todo = kept
	c.sessMu.Unlock()
	put, ok := 0, true
	for i := 0; i < len(todo) && ok && c.ctx.Err() == nil; i += sessionBatch {
		n, err := c.putBackBatch(todo[i:min(i+sessionBatch, len(todo))])
		put += n
		ok = err == nil
	}
	c.log.Info().Int("sessions", put).Int("already_stored", len(todo)-put).Bool("complete", ok).
		Msg("fleet: sessions put back into redis")
	return ok
}

// putBackBatch runs putBackScript for each binding of batch in one
// pipeline and returns how many it put back.
func (c *Cluster) putBackBatch(batch []sessBind) (int, error) {
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	defer cancel()
	if err := putBackScript.Load(ctx, c.rdb).Err(); err != nil {
		return 0, err
	}
	cmds := make([]*redis.Cmd, len(batch))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, b := range batch {
			msg, _ := json.Marshal(b) // plain fields: cannot fail
			cmds[i] = putBackScript.EvalSha(ctx, p, []string{c.sessPrefix + b.ID, c.sessChannel},
				b.Key, b.TTL, string(msg))
		}
		return nil
	})
	n := 0
	for _, cmd := range cmds {
		if v, _ := cmd.Int(); v == 1 {
			n++
		}
	}
	return n, err
}

// loadSessionsAsync asks for a background load of the sessions stored in
// Redis: it starts one, or makes the one running go over them once more
// (a load asked for while one runs may have been asked for because the
// subscription just started: bindings published before it must be seen).
func (c *Cluster) loadSessionsAsync() {
	if c.pool == nil {
		return
	}
	c.loadAgain.Store(true)
	if !c.loading.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1)
	go func() { // owner: Cluster; ends when no load is asked for, or on Close
		defer c.wg.Done()
		for {
			for c.loadAgain.Swap(false) && c.ctx.Err() == nil {
				// A put-back first: the load then finds the fleet's
				// sessions whichever instance put them back.
				if c.putBackDue.Swap(false) && !c.putBackSessions() {
					c.putBackDue.Store(true)
				}
				c.loadSessions()
			}
			c.loading.Store(false)
			if !c.loadAgain.Load() || !c.loading.CompareAndSwap(false, true) {
				return
			}
		}
	}()
}

// loadSessions fills the local session table with the stored bindings it
// lacks (a binding held locally may be newer: it is kept).
func (c *Cluster) loadSessions() {
	var cursor uint64
	loaded := 0
	for loaded < maxLoadedSessions {
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		keys, next, err := c.rdb.Scan(ctx, cursor, c.sessPrefix+"*", 1000).Result()
		if err != nil {
			cancel()
			return // the next reconnect loads again
		}
		if len(keys) > 0 {
			gets := make([]*redis.StringCmd, len(keys))
			ttls := make([]*redis.DurationCmd, len(keys))
			_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					gets[i] = p.Get(ctx, k)
					ttls[i] = p.PTTL(ctx, k)
				}
				return nil
			})
			if err != nil && err != redis.Nil {
				cancel()
				return
			}
			for i, k := range keys {
				key, gerr := gets[i].Result()
				left, terr := ttls[i].Result()
				if gerr != nil || terr != nil || left <= 0 {
					continue // expired meanwhile
				}
				id := strings.TrimPrefix(k, c.sessPrefix)
				c.noteSession(id, key, time.Now().Add(left), false)
				c.pool.ApplySession(id, key, left, true)
				loaded++
			}
		}
		cancel()
		if cursor = next; cursor == 0 {
			return
		}
	}
}
