package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/cluster"
	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/internal/splice"
	"github.com/rotor-proxy/rotor/upstream"
)

// Server is a running rotor: front listeners, the pool, the health tracker
// and its prober loop, and the admin API.
type Server struct {
	log   zerolog.Logger
	clock health.Clock
	tr    *health.Tracker
	pool  *upstream.Pool
	// fleet is the fleet-mode member ([cluster]); nil in single-process
	// mode. Started by Start, closed by Shutdown after the prober stopped.
	fleet *cluster.Cluster

	cfg atomic.Pointer[Config]
	// boot is the config New built the server with: the running one for
	// what only a restart changes (listeners, connection caps, [cluster],
	// upstream_ca_file, state_file), which Reload compares against.
	boot *Config
	auth atomic.Pointer[authenticator]
	// guard slows client password guessing (authguard.go).
	guard *authGuard
	// metricsCapped is whether the last apply left /metrics without the
	// per-upstream series (metrics.per_upstream_limit); apply logs changes.
	metricsCapped atomic.Bool

	ctx    context.Context // cancelled by Shutdown: ends waits and the prober
	cancel context.CancelFunc
	// draining is set when Shutdown begins. The admin listener stays up
	// through the drain, its /healthz answering 503, and closes last.
	draining atomic.Bool
	adminWG  sync.WaitGroup // the admin listener's server
	// runRecord is Options.RunRecord: written by Start, removed by Shutdown.
	runRecord string
	// logDropped is Options.LogDropped, read at scrape time.
	logDropped func() uint64

	tunnels registry
	// dials holds the SOCKS5 requests past their handshake that wait for
	// an upstream or dial one (socksTunnel): the drain waits for them, as
	// it waits for the HTTP front's connections (h1), and cancels those
	// left when its grace runs out.
	dials registry
	// cutting is set when the drain stops waiting (shutdown_grace over,
	// or a second signal), before it cancels and closes what remains:
	// what ends from then on as cancelled, or as a client that went away,
	// was cut by the drain (outcome shutdown, drainCut), not by its client.
	cutting       atomic.Bool
	reactor       *splice.Reactor // parks idle tunnel directions; nil: a goroutine per direction
	connID        atomic.Uint64
	acceptErrAt   atomic.Int64 // UnixNano of the last "accept failed" line
	acceptErrs    atomic.Int64 // failed accepts not logged since
	overloadAt    atomic.Int64 // UnixNano of the last "out of a local resource" line
	localNames    localNames   // this machine's names, for selfTarget
	overloads     atomic.Int64 // such failures not logged since
	metrics       *metrics
	limits        *connLimits
	transports    sync.Map     // trKey → *http.Transport, fwdKey → *fwdClient
	h1            h1Front      // the HTTP proxy front's connections
	socksHS       handshakes   // SOCKS5 front connections with no tunnel yet
	socksRefusing atomic.Int32 // over-limit SOCKS5 refusals in conversation (refuseSOCKS)
	hijackRelease sync.Map     // net.Conn → func(): slot of a hijacked conn, until its tunnel ends

	// removedSecrets lets the state file scrub the records kept of
	// removed upstreams (apply notes them).
	removedSecrets removedSecrets
	// peerSecrets hides every secret of the running config in peer text
	// and admin-API details (scrubPeer); apply sets it.
	peerSecrets secretScrubber

	listCounts map[string]int // upstreams per list file in the running config (apply; Reload is serialised)
	// startAdded holds the start's "upstream added" lines until the state
	// file has restored the records, so that each says the state its
	// upstream starts in; applied marks the first apply done.
	startAdded func()
	applied    bool
	mu         sync.Mutex // guards listeners and servers
	listeners  map[string]net.Listener
	servers    []*http.Server
	wg         sync.WaitGroup // accept loops, conn handlers, prober
	tunnelWG   sync.WaitGroup // relays of established tunnels
}

// Options are the non-config dependencies of a Server.
type Options struct {
	Log   zerolog.Logger
	Clock health.Clock // nil: real time
	// UpstreamTLS is the client TLS config for https:// upstream proxies;
	// nil means the system roots.
	UpstreamTLS *tls.Config
	// RunRecord is the file in which Start records the admin listener's
	// bound address for `rotor -healthcheck` (RunRecordPath); "" writes
	// none.
	RunRecord string
	// LogDropped returns the log lines dropped since start because the
	// log output was not taking them (logbuf.Writer.Dropped), for
	// rotor_log_lines_dropped_total; nil reports 0.
	LogDropped func() uint64
}

// New builds a server from cfg. It does not listen yet.
func New(cfg *Config, opt Options) (*Server, error) {
	clock := opt.Clock
	if clock == nil {
		clock = health.RealClock()
	}
	s := &Server{log: opt.Log, clock: clock, boot: cfg, listeners: map[string]net.Listener{}, runRecord: opt.RunRecord, logDropped: opt.LogDropped}
	s.h1.bodyIdle = h1BodyIdle
	s.guard = newAuthGuard(clock)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.tr = health.NewTracker(trackerConfig(cfg), clock, opt.Log)
	if cfg.Cluster.Enabled() {
		// Installed before any upstream is added, so every record is
		// shared and every probe asks for the fleet's lease.
		fl, err := cluster.New(cfg.Cluster, s.tr, opt.Log)
		if err != nil {
			return nil, err
		}
		s.fleet = fl
		s.tr.SetFleet(fl, fl, fl.RetryInterval())
	}
	fail := func(err error) (*Server, error) {
		if s.fleet != nil {
			_ = s.fleet.Close()
		}
		return nil, err
	}
	upTLS := opt.UpstreamTLS
	if upTLS == nil {
		t, err := cfg.upstreamTLS() // checked by validate; the file may have gone since
		if err != nil {
			return fail(fmt.Errorf("upstream_ca_file: %w", err))
		}
		upTLS = t
	}
	// The destination policy is forbidDestination's, which reads the
	// config in force at each dial: the dialers are built once per
	// upstream, and a reload of allow_private_destinations must apply.
	dial := upstream.DialConfig{AllowPrivate: true, TLS: upTLS, KeepAlive: dialKeepAlive,
		Forbid: s.forbidDestination, Scrub: s.scrubPeer}
	pool, err := upstream.NewPool(cfg.Pool, dial, s.tr, clock, opt.Log)
	if err != nil {
		return fail(err)
	}
	s.pool = pool
	pool.SetBeforeDial(s.connRoom) // tunnels count idle forward connections too
	if s.fleet != nil {
		// Per-upstream limits are divided among the live instances and
		// sticky sessions are shared, off the data path (docs/fleet.md).
		s.fleet.SetPool(pool)
		pool.SetFleet(s.fleet)
	}
	s.metrics = newMetrics(s)
	if s.fleet != nil {
		s.metrics.reg.MustRegister(s.fleet.Collector())
	}
	s.limits = newConnLimits(cfg.Listen.MaxConnections, cfg.Listen.MaxConnectionsPerIP)
	specs, lists, err := s.upstreamSpecs(cfg)
	if err != nil {
		return fail(err)
	}
	if err := s.apply(cfg, specs, lists); err != nil {
		return fail(err)
	}
	return s, nil
}

// errPrivateDestination refuses a private destination of the direct
// upstream (forbidDestination).
var errPrivateDestination = errors.New("not a public address (allow_private_destinations = false)")

// forbidDestination is the direct dialer's policy (DialConfig.Forbid) on
// the address a target resolved to: only public addresses unless the
// config in force allows private ones (read at each dial, so a reload
// that tightens allow_private_destinations holds for the next tunnel and
// probe), and never rotor's own listeners (forbidSelf).
func (s *Server) forbidDestination(ap netip.AddrPort) error {
	if cfg := s.cfg.Load(); (cfg == nil || !cfg.AllowPrivateDestinations) && upstream.ForbiddenDestination(ap.Addr()) {
		return errPrivateDestination
	}
	return s.forbidSelf(ap)
}

func trackerConfig(cfg *Config) health.Config {
	scope := func(s string) health.Scope {
		if s == "target" {
			return health.ScopeTarget
		}
		return health.ScopeUpstream
	}
	probe := cfg.Probe
	// Checked by validate; a file that went bad since leaves the system's CAs.
	probe.TLS, _ = cfg.probeTLS()
	return health.Config{
		Cooldown:             cfg.Cooldown,
		Probe:                probe,
		SlowStart:            cfg.Pool.SlowStart,
		StartEligible:        cfg.Pool.StartEligible,
		ScopeTargetHTTPError: scope(cfg.TargetHTTPError.Scope),
		ScopeSlowBody:        scope(cfg.SlowBody.Scope),
	}
}

// upstreamSpecs reads cfg's upstreams, list files included. A list file
// that gave upstreams under the running config and gives none now is an
// error: an empty or unreadable-looking list is far more often a file
// caught mid-write, or a generator that failed, than a wish to drop
// every proxy in it, and refusing it keeps the running pool and its
// records (removing the [[upstream_file]] drops a list). At start, or for
// a list that was empty before too, it is a warning.
func (s *Server) upstreamSpecs(cfg *Config) ([]upstream.Spec, map[string]int, error) {
	specs, lists, err := cfg.Specs(s.log)
	if err != nil {
		return nil, nil, err
	}
	counts := make(map[string]int, len(lists))
	for _, l := range lists {
		counts[l.Path] = l.N
		if l.N > 0 {
			continue
		}
		if had := s.listCounts[l.Path]; had > 0 {
			return nil, nil, ConfigErrors{cfg.emptyListError(l, fmt.Sprintf("; it gave %d upstreams until now, so the running list stays (remove the [[upstream_file]] to drop it)", had))}
		}
		s.log.Warn().Str("file", l.Path).Err(cfg.emptyListError(l, "")).Msg("upstream_file: " + emptyListMsg)
	}
	return specs, counts, nil
}

// apply installs cfg's upstreams (specs, from upstreamSpecs) and
// credentials.
func (s *Server) apply(cfg *Config, specs []upstream.Spec, lists map[string]int) error {
	before := s.statesByName()
	old := s.pool.Endpoints()
	// The books carry the failures of the upstreams the update removes
	// into rotor_failures_total as it happens (metrics.go).
	var added, removed []string
	err := s.metrics.books.reload(s.tr, old, s.clock.Now(), func() ([]*upstream.Endpoint, error) {
		var err error
		added, removed, err = s.pool.Update(specs)
		return s.pool.Endpoints(), err
	})
	if err != nil {
		return err
	}
	s.peerSecrets.set(peerSecrets(cfg, old, s.pool.Endpoints())) // the removed ones' dials may still answer
	if len(removed) > 0 {
		s.removedSecrets.note(old, s.pool.Endpoints())
	}
	if !s.applied && cfg.statePath() != "" {
		// At start the state file restores records after this: the
		// lines come then (startStateFile), with the restored states; an
		// upstream's "added to=probe_allowed" then "restored: cooling"
		// read as two changes.
		s.startAdded = func() { s.logApplied(cfg, added, removed, before) }
	} else {
		s.logApplied(cfg, added, removed, before)
	}
	s.applied = true
	s.logRenamed(old, s.pool.Endpoints())
	s.listCounts = lists
	if s.fleet != nil {
		// auth_rejected failures are shared with a keyed fingerprint of
		// the password, never the password (cluster.SetCredentials).
		pw := make(map[string]string, len(specs))
		for _, sp := range specs {
			if sp.URL != nil && sp.URL.User != nil {
				pw[upstream.Identity(sp.URL)], _ = sp.URL.User.Password()
			} else if sp.URL != nil {
				pw[upstream.Identity(sp.URL)] = ""
			}
		}
		s.fleet.SetCredentials(pw)
	}
	s.pruneTransports(cfg)
	s.auth.Store(newAuthenticator(cfg.Clients))
	prev := s.cfg.Swap(cfg)
	if prev != nil && prev.AllowPrivateDestinations && !cfg.AllowPrivateDestinations {
		s.closeIdleForward()
	}
	return nil
}

// Pool returns the server's pool.
func (s *Server) Pool() *upstream.Pool { return s.pool }

// Tracker returns the server's health tracker.
func (s *Server) Tracker() *health.Tracker { return s.tr }

// Config returns the configuration in force.
func (s *Server) Config() *Config { return s.cfg.Load() }

// Start opens the listeners of the config and starts serving. It fails
// without serving anything when a listener cannot be opened.
func (s *Server) Start() error {
	cfg := s.cfg.Load()
	if err := checkExposure(cfg); err != nil {
		return err
	}
	type front struct {
		name, addr string
	}
	fronts := []front{{"socks5", cfg.Listen.SOCKS5}, {"http", cfg.Listen.HTTP}, {"admin", cfg.Listen.Admin}}
	for _, f := range fronts {
		if f.addr == "" {
			continue
		}
		ln, err := listen(f.addr)
		if err != nil {
			s.closeListeners()
			return fmt.Errorf("listen %s on %s: %w", f.name, f.addr, err)
		}
		s.listeners[f.name] = ln
	}
	if openProxy(cfg) {
		s.log.Warn().Msg(openProxyWarning)
	}
	if r, err := splice.NewReactor(); err == nil {
		s.reactor = r
	} else {
		s.log.Debug().Err(err).Msg("no tunnel reactor: one goroutine per tunnel direction")
	}
	s.startStateFile()
	if s.fleet != nil {
		s.fleet.Start()
	}
	s.wg.Add(1)
	go func() { // owner: Server; ends when s.ctx is cancelled by Shutdown
		defer s.wg.Done()
		_ = s.tr.Run(s.ctx)
	}()
	// Before "listening" is logged: whoever waits for that line finds the
	// record. Connections made before serving starts wait in the backlog.
	s.writeRunRecord()
	for name, ln := range s.listeners {
		s.log.Info().Str("listener", name).Str("addr", ln.Addr().String()).Msg("listening")
		switch name {
		case "socks5":
			s.wg.Add(1)
			go s.acceptSOCKS(ln)
		case "http":
			s.h1.handler = s.proxyHandler()
			s.wg.Add(1)
			go s.acceptHTTP(ln) // owner: Server; ends when the listener is closed
		case "admin":
			s.serveHTTP(ln, s.drainingHealthz(s.adminHandler()), "admin")
		}
	}
	return nil
}

// Addr returns the bound address of a front ("socks5", "http", "admin"),
// or "" when it is not listening.
func (s *Server) Addr(front string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ln, ok := s.listeners[front]; ok {
		return ln.Addr().String()
	}
	return ""
}

func (s *Server) serveHTTP(ln net.Listener, h http.Handler, name string) {
	cfg := s.cfg.Load()
	// ReadTimeout: the whole request, body included, within the handshake
	// timeout, as the HTTP front takes small bodies (the admin's largest is
	// a 16 KiB /report): a body promised and never sent held a goroutine
	// and an fd for ever. No handler uses r.Context(), which net/http
	// cancels when it runs out.
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.Listen.HandshakeTimeout,
		ReadTimeout:       cfg.Listen.HandshakeTimeout,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          httpErrorLog(s.log, name),
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	s.mu.Lock()
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	s.adminWG.Add(1)
	go func() { // owner: Server; ends when Shutdown closes the server, last
		defer s.adminWG.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			s.log.Error().Err(err).Str("listener", name).Msg("serve failed")
		}
	}()
}

// closeListeners closes the listeners named, or every one when none is.
func (s *Server) closeListeners(names ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ln := range s.listeners {
		if len(names) == 0 || slices.Contains(names, name) {
			_ = ln.Close()
		}
	}
}

// Shutdown stops accepting, lets open tunnels and the requests in
// progress on either front (waiting for an upstream, dialling one, or
// relaying a forwarded answer) finish until ctx ends, then cuts what
// remains, stops the prober and writes the state file. The admin listener
// stays up until the end, so /metrics can be scraped through the drain
// while /healthz answers 503 "shutting down"; cancelling ctx ends the
// drain at once. It returns once every goroutine the server started has
// ended.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	s.guard.stop() // delayed wrong-password answers go out now: nothing to drain for
	s.closeListeners("socks5", "http")
	// SOCKS5 clients still in their handshake have no tunnel to finish
	// (like the HTTP front's idle keep-alives): closed now, not when
	// listen.handshake_timeout ends them. One whose handshake ended
	// first is in s.dials already (serveSOCKS), so the wait sees it.
	s.socksHS.closeAll()
	s.h1.stop()
	// The requests on both fronts are waited for before anything is
	// cancelled: a client waiting for an upstream keeps its
	// pool.wait_for_upstream on the SOCKS5 front as on the HTTP front.
	if !s.h1.wait(ctx) || !s.dials.wait(ctx) || !s.tunnels.wait(ctx) {
		s.cut(ctx)
	}
	<-s.h1.ended
	s.cancel() // ends the prober (and anything still waiting on s.ctx)
	s.wg.Wait()
	// The SOCKS5 front answers a client before its tunnel is registered,
	// so a tunnel may have opened after the registry was seen empty (or
	// cut). No handler is left to open another: this wait is the last,
	// and exact.
	if !s.tunnels.wait(ctx) {
		s.cut(ctx)
	}
	s.tunnelWG.Wait()
	if s.reactor != nil {
		_ = s.reactor.Close() // after the tunnels: none is parked any more
	}
	if s.fleet != nil {
		_ = s.fleet.Close() // after the prober: its probes may still release leases
	}
	s.stopStateFile()
	s.closeAdmin(ctx)
	s.removeRunRecord()
	return nil
}

// cut ends what the drain still holds once ctx ended it: the requests in
// progress on either front are cancelled (a client still waiting for an
// upstream gets 0x01 / 503 canceled; a forwarded answer is cut short) and
// the open tunnels force-closed; each one's line says outcome shutdown.
// One line counts both, tunnels and requests apart; a request or tunnel
// an earlier cut closed is not counted again.
func (s *Server) cut(ctx context.Context) {
	s.cutting.Store(true) // before anything is cut: see drainCut
	// Counted first, cut after the line, which so comes before the
	// lines of what it cuts.
	fwd, cutFwd := s.h1.cut()
	dials, cutDials := s.dials.takeAll()
	tunnels, cutTunnels := s.tunnels.takeAll()
	if requests := fwd + dials; requests != 0 || tunnels != 0 {
		msg := "shutdown grace over: closing open tunnels"
		if errors.Is(ctx.Err(), context.Canceled) {
			msg = "drain ended early: closing open tunnels" // a second signal
		}
		s.log.Warn().Int("requests", requests).Int("tunnels", tunnels).Msg(msg)
	}
	cutFwd()
	cutDials()
	cutTunnels()
}

// closeAdmin shuts the admin listener's server down: requests in flight
// may finish until ctx ends.
func (s *Server) closeAdmin(ctx context.Context) {
	s.mu.Lock()
	servers := append([]*http.Server(nil), s.servers...)
	s.mu.Unlock()
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}
	s.adminWG.Wait()
}

// Reload swaps in cfg: upstreams are matched by identity so unchanged ones
// keep their health; credentials and policies change for new connections.
// Listener addresses cannot change without a restart; that is reported.
func (s *Server) Reload(cfg *Config) error {
	// Restart-only keys are compared with the running values, not the
	// last file's: a change undone by the next reload is not reported again.
	old := s.boot
	// Everything that can refuse the new config is read before anything
	// changes, so a refused reload leaves the old config whole.
	specs, lists, err := s.upstreamSpecs(cfg)
	if err != nil {
		return err
	}
	// The listeners keep the addresses they were bound to until a restart:
	// a file that moves a front to loopback and drops its [[client]] (or
	// the admin_token) would otherwise open the running wildcard listener.
	if err := exposure(bound(cfg, old), "make the running listeners", "reload"); err != nil {
		return fmt.Errorf("%w (listeners keep their start-up addresses until a restart)", err)
	}
	for _, l := range []struct{ name, from, to string }{
		{"socks5", old.Listen.SOCKS5, cfg.Listen.SOCKS5}, {"http", old.Listen.HTTP, cfg.Listen.HTTP}, {"admin", old.Listen.Admin, cfg.Listen.Admin},
	} {
		if l.from != l.to {
			s.log.Warn().Str("listener", l.name).Str("from", l.from).Str("to", l.to).
				Msg("reload: listener address changed; it takes effect after a restart")
		}
	}
	// Only a change is applied (and logged as "health config updated"):
	// the same values would wake the prober and every waiter for nothing.
	if healthChanged(s.cfg.Load(), cfg) {
		if err := s.tr.SetConfig(trackerConfig(cfg)); err != nil {
			return err
		}
	}
	if err := s.pool.SetConfig(cfg.Pool); err != nil {
		return err
	}
	if old.Cluster != cfg.Cluster {
		s.log.Warn().Msg("reload: [cluster] changed; it takes effect after a restart")
	}
	if old.Listen.MaxConnections != cfg.Listen.MaxConnections || old.Listen.MaxConnectionsPerIP != cfg.Listen.MaxConnectionsPerIP {
		s.log.Warn().Msg("reload: listen.max_connections / max_connections_per_ip changed; they take effect after a restart")
	}
	if old.UpstreamCAFile != cfg.UpstreamCAFile {
		s.log.Warn().Msg("reload: upstream_ca_file changed; it takes effect after a restart")
	}
	if old.StateFile != cfg.StateFile {
		// The writer keeps the path it restored from: switching files under
		// it would mean restoring a second file into live records.
		s.log.Warn().Str("from", old.StateFile).Str("to", cfg.StateFile).
			Msg("reload: state_file changed; it takes effect after a restart")
	}
	wasOpen := openProxy(bound(s.cfg.Load(), old))
	if err := s.apply(cfg, specs, lists); err != nil {
		return err
	}
	if !wasOpen && openProxy(bound(cfg, old)) {
		s.log.Warn().Msg(openProxyWarning)
	}
	if s.fleet != nil {
		s.fleet.Reconcile() // new upstreams pick up their shared records
	}
	s.kickState()
	s.log.Info().Int("upstreams", len(s.pool.Endpoints())).Msg("config reloaded")
	return nil
}

// drainingHealthz answers /healthz with 503 once Shutdown began: the admin
// listener stays up through the drain, and an orchestrator or load
// balancer must see that rotor is going away, not that it is healthy.
func (s *Server) drainingHealthz(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.draining.Load() && r.URL.Path == "/healthz" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "shutting down\n")
			return
		}
		next.ServeHTTP(w, r)
	})
}
