package upstream

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// hostCacheTTL is how long the addresses of an upstream proxy given by
// name are reused. Go's resolver caches nothing and commercial gateways
// are names (gate.provider.example:7000): without this each tunnel waits
// for a DNS answer before its TCP connect. A minute follows a provider's
// DNS changes about as fast as browsers do.
const hostCacheTTL = time.Minute

// minAttempt is the least time one address gets when the connect budget is
// split across several (net.Dialer's own floor for a name).
const minAttempt = 2 * time.Second

// hostCache resolves one proxy host name and keeps the answer for
// hostCacheTTL. When every address it gave fails to connect, it is dropped
// and the next dial asks DNS again. While one dial refreshes an expired
// answer, others keep using it.
type hostCache struct {
	host    string
	resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	now     func() time.Time // monotonic; tests replace it

	mu         sync.Mutex
	addrs      []netip.Addr
	expires    time.Time
	refreshing bool
}

func newHostCache(host string) *hostCache {
	return &hostCache{
		host: host,
		resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		now: time.Now,
	}
}

// lookup returns the host's addresses, from the cache while it is fresh.
func (h *hostCache) lookup(ctx context.Context) ([]netip.Addr, error) {
	h.mu.Lock()
	if h.addrs != nil && (h.now().Before(h.expires) || h.refreshing) {
		a := h.addrs
		h.mu.Unlock()
		return a, nil
	}
	h.refreshing = true
	h.mu.Unlock()
	addrs, err := h.resolve(ctx, h.host)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refreshing = false
	if err != nil {
		return nil, err
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	h.addrs, h.expires = addrs, h.now().Add(hostCacheTTL)
	return addrs, nil
}

// forget drops the answer: every address failed to connect.
func (h *hostCache) forget() {
	h.mu.Lock()
	h.addrs = nil
	h.mu.Unlock()
}

// dialHost connects to port on one of h's addresses, in the resolver's
// order (see dialAddrs). When all fail (not because the caller gave up),
// the answer is dropped, so the next dial asks DNS again.
func dialHost(ctx context.Context, d net.Dialer, h *hostCache, port uint16, budget time.Duration) (net.Conn, error) {
	addrs, err := h.lookup(ctx)
	if err == nil && len(addrs) == 0 {
		err = &net.DNSError{Err: "no addresses", Name: h.host, IsNotFound: true}
	}
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	c, err := dialAddrs(ctx, d, addrs, port, budget)
	if err != nil && !IsCanceled(err) { // not the caller giving up: ask DNS again next time
		h.forget()
	}
	return c, err
}

// dialAddrs connects to port on one of addrs, in turn, within one connect
// budget split across the addresses left (as net.Dialer does for a name),
// so one address that drops packets does not use up the whole budget. It
// returns the first error when all fail. A refusal by the destination
// policy (ErrDestinationForbidden, from d's Control hook) ends it there:
// it judges the destination, which the next address is too.
func dialAddrs(ctx context.Context, d net.Dialer, addrs []netip.Addr, port uint16, budget time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var first error
	for i, a := range addrs {
		left := time.Until(deadlineOf(ctx))
		d.Timeout = max(left/time.Duration(len(addrs)-i), min(minAttempt, left))
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil || errors.Is(err, ErrDestinationForbidden) {
			break
		}
	}
	return nil, first
}

func deadlineOf(ctx context.Context) time.Time {
	dl, _ := ctx.Deadline()
	return dl
}
