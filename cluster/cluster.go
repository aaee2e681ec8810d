package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/health"
)

// Tracker is what the cluster needs from health.Tracker.
type Tracker interface {
	ApplyRemote(key string, rs health.RemoteState) bool
	SetHistory(key string, h []health.Transition, bound int) bool
	Shared(key string) (health.RemoteState, bool)
	Policy() health.Policy
	Records() []*health.Record
}

// opTimeout bounds every Redis command: nothing waits on Redis longer, and
// no Redis command ever runs on the data path.
const opTimeout = time.Second

// Cluster is one instance's membership in a fleet. It implements
// health.FleetHook (Publish) and health.ProbeGate (TryProbe). Create it
// with New, install it on the tracker, Start it, and Close it after the
// tracker's Run has returned.
type Cluster struct {
	cfg Config
	log zerolog.Logger
	tr  Tracker
	rdb *redis.Client
	tok string // instance name + "/" + random: this process's identity in records and leases

	recPrefix, leasePrefix, channel, genKey string

	// Shared limits and sessions (share.go). pool is set once by SetPool
	// before Start (nil: nothing to share).
	pool                             Pool
	instKey, sessPrefix, sessChannel string
	instTTL                          time.Duration
	instances                        atomic.Int64 // live instances last counted
	// beat is the heartbeat's own state, touched only by heartbeat (in
	// Start, then on the sync loop).
	beat struct {
		since  int64     // Redis time (ms) of this process's first heartbeat; 0 before it
		dup    bool      // another live process heartbeats under this instance name
		logged time.Time // last warning about it
	}
	loading   atomic.Bool // a session load runs
	loadAgain atomic.Bool // a session load is asked for

	sessMu sync.Mutex // guards sessPending (apart from mu: SessionBound is on the data path)
	// sessPending holds session bindings not yet written, latest per id.
	sessPending map[string]sessBind

	// knownMu guards known and knownSwept (the subscriber, the sync loop
	// and session loads touch them, never the data path).
	knownMu sync.Mutex
	// known is what this instance knows Redis holds of the fleet's
	// sessions: the last binding written or heard of per id, and when its
	// key expires there. A new Redis generation gets them back from it.
	known      map[string]sessKnown
	knownSwept time.Time
	putBackDue atomic.Bool // the known sessions are to be put back (a new Redis generation)

	connected atomic.Bool
	kick      chan struct{}
	// dialErr is the last failed dial's error, nil after a dial that
	// succeeded: the cause behind a command that timed out (down.go).
	dialErr atomic.Pointer[error]
	// downEvery is how often a warning about an outage Redis itself
	// causes (a wrong password) is repeated while it lasts: a minute.
	downEvery time.Duration
	// pwFrom is where the Redis password comes from, for the warning
	// about a password Redis rejects (down.go).
	pwFrom passwordFrom

	ctx    context.Context // cancelled by Close: ends every goroutine below
	cancel context.CancelFunc
	wg     sync.WaitGroup // subscriber, sync loop, lease renewers

	// applyMu makes consider's version check and the apply one step:
	// records arrive on several goroutines (messages, pulls, the results
	// of concurrent writes), and two that passed the check in version
	// order could otherwise apply out of it, leaving the older state.
	applyMu sync.Mutex

	mu sync.Mutex
	// mu guards the fields below.
	// pending holds the local transitions not yet written, per key: the
	// latest, after the newest operator action queued since (queue).
	pending map[string][]health.RemoteState
	// writing marks the keys flush is writing now; a record read meanwhile
	// waits in held (the newest) until the write's result is noted.
	writing  map[string]bool
	held     map[string]heldRecord
	releases []string         // lease keys to release once pending is written
	seen     map[string]int64 // newest record version applied or written, per key
	// sums holds the content (record.sum) of the version seen, per key: the
	// same version with other content is a record Redis lost or rolled back.
	sums map[string]uint64
	// recheck holds the keys whose record the sync loop is to re-read and
	// put back when Redis lost or rolled it back (consider noticed).
	recheck map[string]bool
	ops     map[string]stamp // newest operator action known, per key (survives a Redis restart)
	gen     string           // Redis generation seen last ("" before the first contact)
	down    bool             // an outage was logged and has not ended
	downLog downLog          // what the outage's last warning said, and when (down.go)
	freshAt time.Time        // last (re)connection or new Redis generation
	joined  bool             // Redis answered once since this process started
	started bool

	// clamps holds the clamped end of the last remote cooling clamped,
	// per key (clamp).
	clamps map[string]clampNote

	// credMu guards creds and credWarned.
	credMu sync.Mutex
	// creds holds the fingerprint of this instance's credentials per
	// upstream key (SetCredentials); never a password.
	creds map[string]string
	// credWarned marks the keys whose credential disagreement was logged.
	credWarned map[string]bool
}

var (
	_ health.FleetHook = (*Cluster)(nil)
	_ health.ProbeGate = (*Cluster)(nil)
)

// New returns a cluster member for cfg (defaults filled) feeding tr. It
// does not contact Redis; Start does. The Redis password comes from
// cfg.RedisPasswordEnv when set.
func New(cfg Config, tr Tracker, log zerolog.Logger) (*Cluster, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opt, err := redis.ParseURL(cfg.Redis)
	if err != nil {
		return nil, errors.New("cluster.redis: invalid URL")
	}
	pwFrom := passwordFromNone
	switch {
	case cfg.RedisPasswordEnv != "":
		opt.Password = os.Getenv(cfg.RedisPasswordEnv)
		pwFrom = passwordFromEnv
	case opt.Password != "":
		pwFrom = passwordFromURL
	}
	opt.ClientName = "rotor-" + cfg.Instance
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = opTimeout, opTimeout, opTimeout
	opt.PoolTimeout = opTimeout
	opt.MaxRetries = 1
	opt.DisableIdentity = true
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	c := &Cluster{
		cfg:         cfg,
		log:         log.With().Str("instance", cfg.Instance).Logger(),
		tr:          tr,
		tok:         cfg.Instance + "/" + hex.EncodeToString(rnd[:]),
		recPrefix:   cfg.Prefix + ":rec:",
		leasePrefix: cfg.Prefix + ":lease:",
		channel:     cfg.Prefix + ":events",
		genKey:      cfg.Prefix + ":gen",
		instKey:     cfg.Prefix + ":instances",
		sessPrefix:  cfg.Prefix + ":sess:",
		sessChannel: cfg.Prefix + ":sessions",
		instTTL:     instanceTTL,
		sessPending: map[string]sessBind{},
		known:       map[string]sessKnown{},
		kick:        make(chan struct{}, 1),
		downEvery:   time.Minute,
		pwFrom:      pwFrom,
		pending:     map[string][]health.RemoteState{},
		writing:     map[string]bool{},
		held:        map[string]heldRecord{},
		seen:        map[string]int64{},
		sums:        map[string]uint64{},
		recheck:     map[string]bool{},
		ops:         map[string]stamp{},
		clamps:      map[string]clampNote{},
		creds:       map[string]string{},
		credWarned:  map[string]bool{},
	}
	opt.Dialer = c.recordDial(redis.NewDialer(opt))
	c.rdb = redis.NewClient(opt)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

// SetCredentials tells the cluster the password this instance uses for
// each upstream (by identity key; "" for none), replacing what it was told
// before. Only a keyed fingerprint of each is kept (fingerprint): an
// auth_rejected failure is shared with it, and applies only on the
// instances whose fingerprint is the same (a stale password on one
// instance does not cool the upstream for the fleet).
func (c *Cluster) SetCredentials(passwords map[string]string) {
	fp := make(map[string]string, len(passwords))
	for k, pw := range passwords {
		fp[k] = fingerprint(k, pw)
	}
	c.credMu.Lock()
	c.creds = fp
	c.credMu.Unlock()
}

// credOf returns this instance's credential fingerprint for key ("":
// unknown).
func (c *Cluster) credOf(key string) string {
	c.credMu.Lock()
	defer c.credMu.Unlock()
	return c.creds[key]
}

// foreignCred reports whether rec is a credential failure (credFailure)
// written with other credentials than this instance's for the upstream:
// this instance keeps its own state. The first one per upstream is logged
// (never a password or a fingerprint).
func (c *Cluster) foreignCred(rec record) bool {
	if rec.Cred == "" || !credFailure(rec) {
		return false
	}
	c.credMu.Lock()
	mine := c.creds[rec.Key]
	foreign := mine != "" && mine != rec.Cred
	warn := foreign && !c.credWarned[rec.Key]
	if warn {
		c.credWarned[rec.Key] = true
	}
	c.credMu.Unlock()
	if warn {
		c.log.Warn().Str("upstream_key", rec.Key).Str("other", rec.Inst).
			Msg(credMsg)
	}
	return foreign
}

// credMsg is the warning about instances using other credentials.
const credMsg = "fleet: instances disagree on this upstream's credentials; another instance's auth_rejected is not applied here"

// Instance returns this instance's name.
func (c *Cluster) Instance() string { return c.cfg.Instance }

// Connected reports whether Redis answered the last health check.
func (c *Cluster) Connected() bool { return c.connected.Load() }

// LeaseTTL returns the probe lease lifetime in force.
func (c *Cluster) LeaseTTL() time.Duration { return c.cfg.LeaseTTL }

// RetryInterval is how long an instance whose probe another one owns
// waits before asking again (for health.Tracker.SetFleet): short enough
// that a dead owner's lease is taken over soon after it expires.
func (c *Cluster) RetryInterval() time.Duration { return max(c.cfg.LeaseTTL/3, 200*time.Millisecond) }

// Collector returns the rotor_cluster_connected gauge (1 while Redis
// answers, 0 during an outage).
func (c *Cluster) Collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rotor_cluster_connected",
		Help: "1 while the fleet's Redis answers, 0 while this instance serves on its local view.",
	}, func() float64 {
		if c.connected.Load() {
			return 1
		}
		return 0
	})
}

// Start contacts Redis once (bounded by a one-second timeout), so that
// records already shared are applied and probe leases are in force before
// the prober's first probes, then starts the subscriber and the sync loop.
// With Redis down it returns after that timeout and the instance serves
// on its local view.
func (c *Cluster) Start() {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return
	}
	c.started = true
	c.mu.Unlock()
	if c.check() {
		c.heartbeat() // the limits are shared from the first pick
	}
	c.wg.Add(2)
	go c.subscribe() // owner: Cluster; ends when Close cancels c.ctx
	go c.syncLoop()  // owner: Cluster; ends when Close cancels c.ctx
	c.log.Info().Str("redis", redactedAddr(c.rdb)).Msg("fleet mode on")
}

// Close stops every goroutine and closes the Redis client. Held leases are
// not released: they expire (Close runs after the prober has stopped, and
// an abandoned probe's outcome is unknown). Local transitions not yet
// written are lost to the fleet.
func (c *Cluster) Close() error {
	c.leave()
	c.cancel()
	c.wg.Wait()
	return c.rdb.Close()
}

func redactedAddr(rdb *redis.Client) string { return rdb.Options().Addr }

// Publish queues a local transition for the shared record. It never
// blocks: the sync loop writes it, and keeps it queued while Redis is
// unreachable (the latest transition per upstream, after the newest
// operator action queued before it). A local operator action is known at
// once as the newest one (ops): the automatic transitions after it carry
// its stamp, so that a probe that passed after an enable made during an
// outage is not held off by the older disable the enable ended.
func (c *Cluster) Publish(rs health.RemoteState) {
	c.mu.Lock()
	c.pending[rs.Key] = queue(c.pending[rs.Key], rs)
	if operatorAction(rs.State, rs.Stage) {
		if s := (stamp{ms(rs.At.Round(0)), c.cfg.Instance}); s.after(c.ops[rs.Key]) {
			c.ops[rs.Key] = s
		}
	}
	c.mu.Unlock()
	c.wake()
}

// queue adds rs to the queued transitions q of one upstream: an operator
// action replaces them all; an automatic transition replaces the queued
// ones but an operator action, which is written first. (Keeping only the
// latest lost an enable made during an outage to the probe that followed
// it: the probe's eligible carried the old disable's stamp and lost.)
func queue(q []health.RemoteState, rs health.RemoteState) []health.RemoteState {
	if operatorAction(rs.State, rs.Stage) || len(q) == 0 || !operatorAction(q[0].State, q[0].Stage) {
		return []health.RemoteState{rs}
	}
	return []health.RemoteState{q[0], rs}
}

func (c *Cluster) wake() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// TryProbe takes the probe lease of key: SET NX PX with this process's
// token, renewed every LeaseTTL/3 until release. When the lease is taken
// but the shared record shows the probe is needless (a probe passed
// elsewhere, an operator disabled the upstream, a cooldown still runs),
// the record is applied, the lease dropped and ok is false. With Redis
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
		if rec, derr := decodeRecord(raw); derr == nil && !c.foreignCred(rec) && c.settled(rec, time.Now()) {
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
	rs, ok := rec.remote()
	if !ok {
		return
	}
	if c.foreignCred(rec) {
		// Another instance's credentials were rejected: this one keeps
		// its state, and lists the failure in the shared history.
		c.tr.SetHistory(rec.Key, rs.History, c.cfg.History)
		return
	}
	rs = c.clamp(rs)
	rs.HistoryBound = c.cfg.History
	c.tr.ApplyRemote(rec.Key, rs)
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
	if credFailure(nr) {
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
	if shared, ok := rec.remote(); ok {
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
