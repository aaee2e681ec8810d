package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

	// credMu guards pws, credKey, credStored, creds and the maps below.
	credMu sync.Mutex
	// pws holds this instance's password per upstream key
	// (SetCredentials): never logged or written, only fingerprinted.
	pws map[string]string
	// credKey is the fleet's fingerprint key (cred.go): derived from the
	// Redis password, or read from Redis (credStored; nil until then).
	credKey     []byte
	credStored  bool
	credKeyName string // "<prefix>:credkey"
	// creds holds the fingerprint of this instance's credentials per
	// upstream key (empty while credKey is not known).
	creds map[string]string
	// credWarned marks the keys whose credential disagreement was logged.
	credWarned map[string]bool
	// credFailed marks the keys whose upstream rejected this instance's
	// credentials last (keepsOwnCred); credKept the ones whose keeping
	// that state over another instance's record was logged since.
	credFailed, credKept map[string]bool
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
		credKeyName: cfg.Prefix + ":credkey",
		credWarned:  map[string]bool{},
		credFailed:  map[string]bool{},
		credKept:    map[string]bool{},
	}
	if opt.Password != "" {
		c.credKey = keyFromPassword(opt.Password)
	} else {
		c.credStored = true
	}
	opt.Dialer = c.recordDial(redis.NewDialer(opt))
	c.rdb = redis.NewClient(opt)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c, nil
}

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
	c.noteOwnCred(rs)
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
