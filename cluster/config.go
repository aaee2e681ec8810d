// Package cluster owns rotor's fleet mode (issue 10): several rotor
// instances sharing one pool's health through Redis. It keeps a shared
// record per upstream (state, reason, stage, wall-clock deadline, streak,
// recent history) written atomically by a Lua script with a version, spreads
// transitions over pub/sub, and hands out probe leases so that one instance
// probes an upstream per cooldown.
//
// It does not own the state machine (package health does; cluster feeds it
// through health.Tracker.ApplyRemote and receives its transitions through
// health.FleetHook) and it never sits on the data path: picking an upstream
// reads the tracker's local records, which the subscription keeps current.
// With Redis unreachable every instance serves and classifies on its local
// view and reconciles when Redis returns; records a Redis that restarted
// empty lost are put back from what the instances know. Per-upstream limits are divided
// among the live instances and sticky sessions are shared (share.go,
// docs/fleet.md), again without Redis on the data path.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rotor-proxy/rotor/health"
	"github.com/rs/zerolog"
)

// Defaults for zero Config fields.
const (
	DefaultPrefix       = "rotor"
	DefaultLeaseTTL     = 15 * time.Second
	DefaultMaxClockSkew = 2 * time.Second
	DefaultHistory      = 20
	DefaultResync       = 10 * time.Second
)

// Config is the [cluster] table. A zero Config (no table) is single-process
// mode: nothing here runs and no Redis is needed.
type Config struct {
	// Redis is the redis:// (or rediss://) URL of the shared store, e.g.
	// "redis://127.0.0.1:6379/0". Required to turn fleet mode on. A
	// password in the URL works but RedisPasswordEnv is preferred.
	Redis string `toml:"redis"`
	// RedisPasswordEnv names an environment variable holding the Redis
	// password; it overrides one in the URL.
	RedisPasswordEnv string `toml:"redis_password_env"`
	// Instance names this instance in shared records and leases. Default:
	// the hostname. Instances of one fleet must have distinct names: two
	// live processes under one name are both counted for the shared
	// limits, and each logs a warning (share.go).
	Instance string `toml:"instance"`
	// Prefix starts every Redis key and the pub/sub channel, so that
	// several fleets can share one Redis. Default "rotor".
	Prefix string `toml:"prefix"`
	// LeaseTTL is how long a probe lease lasts without renewal: the owner
	// renews it every LeaseTTL/3 while probing, so it only matters when the
	// owner dies, and then another instance probes after it. Default 15s;
	// at least 500ms.
	LeaseTTL time.Duration `toml:"lease_ttl"`
	// MaxClockSkew is the wall-clock disagreement between instances that
	// the fleet tolerates (NTP-synchronised hosts stay far below it). A
	// shared cooling deadline further ahead than the class's max cooldown
	// plus MaxClockSkew is clamped to that. Default 2s.
	MaxClockSkew time.Duration `toml:"max_clock_skew"`
	// History is how many transitions the shared record keeps. Default 20.
	History int `toml:"history"`
	// Resync is how often every record is re-read from Redis, catching
	// messages missed by a subscription that reconnected, and records
	// Redis lost (put back from what this instance knows). Default 10s.
	Resync time.Duration `toml:"resync"`
}

// Enabled reports whether fleet mode is on.
func (c Config) Enabled() bool { return c.Redis != "" }

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Instance == "" {
		if h, err := os.Hostname(); err == nil && h != "" {
			c.Instance = h
		} else {
			c.Instance = "rotor"
		}
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.History == 0 {
		c.History = DefaultHistory
	}
	if c.Resync == 0 {
		c.Resync = DefaultResync
	}
	return c
}

// Validate checks c. A Config with no Redis URL and nothing else set is
// valid (fleet mode off). It reports every problem, joined; each is a
// *KeyError naming its key. Errors never carry a password.
func (c Config) Validate() error {
	if c == (Config{}) {
		return nil
	}
	var errs []error
	if !c.Enabled() {
		errs = append(errs, keyErr("cluster.redis", "required when [cluster] sets anything (fleet mode needs Redis)"))
	} else if err := checkRedisURL(c.Redis); err != nil {
		errs = append(errs, err)
	}
	if c.RedisPasswordEnv != "" && os.Getenv(c.RedisPasswordEnv) == "" {
		errs = append(errs, keyErr("cluster.redis_password_env", "environment variable %s is empty or unset", c.RedisPasswordEnv))
	}
	if strings.ContainsAny(c.Instance, " \t\r\n/") {
		errs = append(errs, keyErr("cluster.instance", "%q must not contain spaces or '/'", c.Instance))
	}
	if strings.ContainsAny(c.Prefix, " \t\r\n") {
		errs = append(errs, keyErr("cluster.prefix", "%q must not contain spaces", c.Prefix))
	}
	if c.LeaseTTL != 0 && c.LeaseTTL < 500*time.Millisecond {
		errs = append(errs, keyErr("cluster.lease_ttl", "must be at least 500ms"))
	}
	if c.MaxClockSkew < 0 {
		errs = append(errs, keyErr("cluster.max_clock_skew", "must not be negative"))
	}
	if c.Resync < 0 {
		errs = append(errs, keyErr("cluster.resync", "must not be negative"))
	}
	if c.History < 0 {
		errs = append(errs, keyErr("cluster.history", "must not be negative"))
	}
	return errors.Join(errs...)
}

// MaxDefaultDB is the highest database number a Redis with its default
// "databases 16" accepts.
const MaxDefaultDB = 15

// checkRedisURL checks the redis key: a redis:// or rediss:// URL that
// go-redis parses, with a host:port that makes an address (go-redis joins
// the URL's host and port without checking them: "h:6379:0" became the
// address "[h:6379]:0", accepted by -check and failing at run time with a
// lookup of the host "h:6379") and a database number that is not
// negative. (go-redis also takes unix:// socket URLs, which the fleet does
// not document or test.) Its error never carries the password: it names
// the host:port only once sure that no part of the password was read as
// it.
func checkRedisURL(s string) error {
	// A '/', '?' or '#' ends the URL's authority, so one in the password
	// leaves what follows it, up to the '@', to be read as the host, the
	// path or the query (which errors would then quote).
	if _, rest, ok := strings.Cut(s, "://"); ok {
		if i := strings.IndexAny(rest, "/?#"); i >= 0 && strings.Contains(rest[i:], "@") {
			return keyErr("cluster.redis", "a '/', '?' or '#' in the password must be percent-encoded (%%2F, %%3F, %%23)")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return keyErr("cluster.redis", "not a redis:// URL (%s)", urlProblem(err))
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return keyErr("cluster.redis", "must be a redis:// or rediss:// URL")
	}
	// u.Host is what follows the userinfo's '@': never the password.
	if !strings.HasPrefix(u.Host, "[") && strings.Contains(u.Hostname(), ":") {
		return keyErr("cluster.redis", "host:port %q does not parse: more than one ':' (an IPv6 address goes in brackets, e.g. [::1]:6379)", u.Host)
	}
	if p := u.Port(); p != "" { // digits only: url.Parse checked them
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return keyErr("cluster.redis", "port %s of %q is not 1-65535", p, u.Host)
		}
	}
	opt, err := redis.ParseURL(s)
	if err != nil {
		return keyErr("cluster.redis", "not a redis:// URL (%s)", redactURLError(err))
	}
	if opt.DB < 0 {
		return keyErr("cluster.redis", "database number %d must not be negative", opt.DB)
	}
	return nil
}

// urlProblem names what url.Parse found wrong. Its messages quote the
// host or port they reject, never the userinfo (the '/', '?' and '#' a
// password could carry into the host are caught before), apart from an
// escape error, which may quote a "%xx" of the password.
func urlProblem(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return "invalid URL"
	}
	var ee url.EscapeError
	if errors.As(ue.Err, &ee) {
		return "a '%' starts no escape: percent-encode it as %25"
	}
	return ue.Err.Error()
}

// Warnings lists what is valid but likely wrong: a database number Redis
// rejects unless its "databases" setting was raised. -check prints them
// and start logs them (through the gateway's Config.Warnings).
func (c Config) Warnings() []string {
	if !c.Enabled() {
		return nil
	}
	opt, err := redis.ParseURL(c.Redis)
	if err != nil || opt.DB <= MaxDefaultDB {
		return nil
	}
	return []string{fmt.Sprintf("cluster.redis: database %d is above %d, which a Redis with the default "+
		"\"databases 16\" rejects (ERR DB index is out of range): the fleet would never connect", opt.DB, MaxDefaultDB)}
}

// KeyError is one invalid [cluster] key ("cluster.lease_ttl"): health's.
type KeyError = health.KeyError

var keyErr = health.KeyErr

// redactURLError keeps go-redis's URL errors from echoing a password: it
// keeps only the message's first clause, which names the problem.
func redactURLError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "://"); i >= 0 {
		return "invalid URL"
	}
	return s
}

// redisLog routes go-redis's internal log lines to a zerolog logger at
// debug level.
type redisLog struct{ log zerolog.Logger }

func (l redisLog) Printf(_ context.Context, format string, v ...any) {
	l.log.Debug().Str("component", "go-redis").Msg(fmt.Sprintf(format, v...))
}

// SetRedisLogger sends go-redis's own log lines (one per failed dial while
// Redis is down) to log at debug level instead of the standard logger's
// stderr, so that an outage is logged once, by the cluster. go-redis has
// a single process-wide logger, so only cmd/rotor should call this, once,
// at start-up (STYLE 1: process-wide state lives in cmd).
func SetRedisLogger(log zerolog.Logger) { redis.SetLogger(redisLog{log: log}) }
