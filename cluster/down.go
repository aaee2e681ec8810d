package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// An outage's warning names what it is, as far as it is known:
//   - Redis unreachable: logged once, when the outage starts; when the
//     command ran out of time (go-redis retries a refused dial until the
//     command's deadline) the last dial's error is the cause shown.
//   - Redis answering but refusing this instance (a wrong or missing
//     password, another error reply such as a database number out of
//     range): a configuration problem that lasts until someone fixes it,
//     so its warning is repeated every downEvery (a minute) meanwhile.
//
// A warning of another kind than the last is logged at once.

// downKind is what an outage's warning said.
type downKind int

const (
	downUnreachable downKind = iota + 1
	downAuth                 // WRONGPASS / NOAUTH
	downRefused              // another error reply
)

// passwordFrom is where this instance's Redis password comes from.
type passwordFrom int

const (
	passwordFromNone passwordFrom = iota // no password is sent
	passwordFromURL                      // the userinfo of cluster.redis
	passwordFromEnv                      // the variable cluster.redis_password_env names
)

// downLog is the outage's last warning (Cluster.mu guards it).
type downLog struct {
	kind downKind
	at   time.Time
}

// recordDial wraps dial so that the last dial's error is kept in
// c.dialErr (nil after a dial that succeeded).
func (c *Cluster) recordDial(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dial(ctx, network, addr)
		if err != nil {
			c.dialErr.Store(&err)
		} else {
			c.dialErr.Store(nil)
		}
		return conn, err
	}
}

// setDown records an outage and logs it (see above). Error texts carry no
// password: go-redis's AUTH replies and dial errors do not hold one.
func (c *Cluster) setDown(err error) {
	c.connected.Store(false)
	kind := downUnreachable
	var rerr redis.Error
	switch {
	case redis.IsAuthError(err):
		kind = downAuth
	case errors.As(err, &rerr):
		kind = downRefused
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		if d := c.dialErr.Load(); d != nil {
			err = *d
		}
	}
	now := time.Now()
	c.mu.Lock()
	last := c.downLog
	log := !c.down || last.kind != kind || (kind != downUnreachable && now.Sub(last.at) >= c.downEvery)
	c.down = true
	if log {
		c.downLog = downLog{kind: kind, at: now}
	}
	c.mu.Unlock()
	if !log || c.ctx.Err() != nil {
		return
	}
	switch kind {
	case downAuth:
		// The hint names where the password comes from (bug: it named
		// redis_password_env for a password in the URL too); never the
		// password itself.
		switch c.pwFrom {
		case passwordFromEnv:
			c.log.Warn().Err(err).Str("redis_password_env", c.cfg.RedisPasswordEnv).
				Msg("redis rejected this instance's password (check the variable redis_password_env names): serving and probing on the local view")
		case passwordFromURL:
			c.log.Warn().Err(err).Msg("redis rejected this instance's password (check the password in the cluster.redis URL): serving and probing on the local view")
		default:
			c.log.Warn().Err(err).Msg("redis rejected this instance's password (none is set: set redis_password_env, or a password in the cluster.redis URL): serving and probing on the local view")
		}
	case downRefused:
		c.log.Warn().Err(err).Msg("redis refused this instance: serving and probing on the local view")
	default:
		c.log.Warn().Err(err).Msg("redis unreachable: serving and probing on the local view")
	}
}
