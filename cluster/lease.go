package cluster

import (
	"context"
	"sync"
	"time"
)

// Probe leases: one instance probes an upstream per cooldown.

// TryProbe takes the probe lease of key: SET NX PX with this process's
// token, renewed every LeaseTTL/3 until release. When the lease is taken
// but the shared record shows the probe is needless (a probe passed
// elsewhere, an operator disabled the upstream, a cooldown still runs),
// the record is applied, the lease dropped and ok is false. A record this
// instance does not apply over its own credential failure (keepsOwnCred:
// another instance's probe passed with other credentials) settles nothing:
// this instance probes with its own. With Redis
// unreachable the instance probes on its own (ok, no lease).
func (c *Cluster) TryProbe(key string) (func(), bool) {
	if !c.connected.Load() {
		c.log.Debug().Str("upstream_key", key).Msg("redis unreachable: probing locally")
		return func() {}, true
	}
	ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
	defer cancel()
	lk := c.leasePrefix + key
	ok, err := c.rdb.SetNX(ctx, lk, c.tok, c.cfg.LeaseTTL).Result()
	if err != nil {
		c.setDown(err)
		return func() {}, true
	}
	if !ok {
		return nil, false
	}
	raw, err := c.rdb.Get(ctx, c.recPrefix+key).Result()
	if err == nil {
		if rec, derr := decodeRecord(raw); derr == nil && !c.foreignCred(rec) && !c.keepsOwnCred(rec) && c.settled(rec, time.Now()) {
			_, _ = releaseScript.Run(ctx, c.rdb, []string{lk}, c.tok).Result()
			c.consider(rec, true)
			return nil, false
		}
	}
	stop := make(chan struct{})
	c.wg.Add(1)
	go c.renew(lk, stop) // owner: Cluster; ends on release (stop), loss of the lease, or Close
	var once sync.Once
	return func() {
		once.Do(func() {
			close(stop)
			c.mu.Lock()
			c.releases = append(c.releases, lk)
			c.mu.Unlock()
			c.wake()
		})
	}, true
}

// renew keeps lease lk alive while its probe runs.
func (c *Cluster) renew(lk string, stop <-chan struct{}) {
	defer c.wg.Done()
	tk := time.NewTicker(c.cfg.LeaseTTL / 3)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-c.ctx.Done():
			return
		case <-tk.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		n, err := renewScript.Run(ctx, c.rdb, []string{lk}, c.tok, c.cfg.LeaseTTL.Milliseconds()).Int()
		cancel()
		if err == nil && n == 0 {
			c.log.Warn().Str("lease", lk).Msg("probe lease lost")
			return
		}
	}
}
