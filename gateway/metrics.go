package gateway

// Prometheus exposition (GET /metrics on the admin listener). Metric and
// label names are part of the contract (CONTRACT.md, "Admin API"); more
// metrics are welcome, none renamed. Labels never carry credentials: an
// upstream is labelled by its display name.
//
// Health counters (failures by class and stage, successes, probes, records
// per state) are read from the tracker at scrape time by poolCollector, so
// there is one set of books, the tracker's (with the failures of removed
// upstreams kept in the pool-wide total: failureBooks). Data-path events the tracker
// does not see (tunnels, bytes, dial latency) are counted here as they
// happen.

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// metrics is the Server's instrumentation: a registry of its own (never
// the global default one, so that several Servers in one process, as in
// tests, do not collide) and the tracker observer, which also wakes the
// state-file writer.
type metrics struct {
	s   *Server
	reg *prometheus.Registry

	tunnelsActive *prometheus.GaugeVec
	tunnelsTotal  *prometheus.CounterVec
	bytesTotal    *prometheus.CounterVec
	dialSeconds   prometheus.Histogram
	probeSeconds  *prometheus.HistogramVec
	transitions   *prometheus.CounterVec
	targetCools   *prometheus.CounterVec
	authFailures  *prometheus.CounterVec
	// forwarding counts the plain-HTTP forwarded requests in progress
	// (requestStart/requestEnd): they hold an upstream as a tunnel does,
	// and count in its active, but are no tunnel.
	forwarding atomic.Int64

	// persist is the state_file writer (statefile.go). It lives here
	// because the tracker has one observer slot and this is its holder.
	persist stateFile

	// books keeps rotor_failures_total monotonic across removals.
	books failureBooks
}

// latencyBuckets suit proxy handshakes: a few ms on a LAN to seconds
// through a slow residential exit.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// newMetrics builds s's registry and installs the tracker observer. It is
// called from New once s.tr and s.pool exist and before any upstream is
// added, so no transition goes unseen.
func newMetrics(s *Server) *metrics {
	m := &metrics{
		s:   s,
		reg: prometheus.NewRegistry(),
		tunnelsActive: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rotor_tunnels_active",
			Help: "Client tunnels open now, by front (socks5, http).",
		}, []string{"front"}),
		tunnelsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_tunnels_total",
			Help: "Client connections and forwarded requests finished, by front (socks5, http, http_forward) and outcome (ok, failed, unavailable, client_gone, bad_request, slow_body, shutdown, overloaded, refused_limit, handshake_error, client_auth).",
		}, []string{"front", "outcome"}),
		bytesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_bytes_total",
			Help: "Bytes relayed, by direction: up (client to upstream) and down (upstream to client).",
		}, []string{"direction"}),
		dialSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rotor_dial_seconds",
			Help:    "Time from a client's request to an established tunnel through an upstream: waiting for an eligible upstream, failed attempts, TCP connect, proxy handshake and target connect.",
			Buckets: latencyBuckets,
		}),
		probeSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rotor_probe_seconds",
			Help:    "Duration of health probes through upstreams, by result (ok, failed).",
			Buckets: latencyBuckets,
		}, []string{"result"}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_transitions_total",
			Help: "Upstream state transitions, by from and to state.",
		}, []string{"from", "to"}),
		targetCools: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_target_cooldowns_total",
			Help: "Per-target cooldowns started (an upstream cooled for one target host only), by class.",
		}, []string{"class"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rotor_client_auth_failures_total",
			Help: "Wrong client passwords (RFC 1929 or Proxy-Authorization), by front (socks5, http) and answer (immediate, delayed: the client failed often lately, and its answer waited). No credentials at all are not counted.",
		}, []string{"front", "answer"}),
	}
	m.persist.init()
	for _, f := range []string{"socks5", "http"} {
		m.tunnelsActive.WithLabelValues(f)
	}
	for _, f := range []string{"socks5", "http", "http_forward"} {
		for _, o := range []string{"ok", "failed", "unavailable"} {
			m.tunnelsTotal.WithLabelValues(f, o)
		}
	}
	for _, f := range []string{"socks5", "http"} {
		for _, a := range []string{"immediate", "delayed"} {
			m.authFailures.WithLabelValues(f, a)
		}
	}
	m.bytesTotal.WithLabelValues("up")
	m.bytesTotal.WithLabelValues("down")
	for _, r := range []string{"ok", "failed"} {
		m.probeSeconds.WithLabelValues(r)
	}
	m.reg.MustRegister(
		m.tunnelsActive, m.tunnelsTotal, m.bytesTotal, m.dialSeconds, m.probeSeconds,
		m.transitions, m.targetCools, m.authFailures,
		poolCollector{s, &m.books},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rotor_waiting_clients",
			Help: "Client connections waiting for an eligible upstream (pool.wait_for_upstream).",
		}, func() float64 { return float64(s.pool.Waiting()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rotor_tunnels_open",
			Help: "Tunnels in the drain registry now, all fronts.",
		}, func() float64 { return float64(s.tunnels.count()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "rotor_requests_in_flight",
			Help: "Plain-HTTP forwarded requests in progress, from their first upstream picked (no tunnel: rotor_tunnels_open leaves them out, rotor_upstream_active counts them on the upstream that carries them).",
		}, func() float64 { return float64(m.forwarding.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "rotor_log_lines_dropped_total",
			Help: "Log lines dropped because the log output (stderr) was not taking them: held past the log buffer's bound while nobody read, or lost in a failed write (a closed pipe).",
		}, func() float64 {
			if s.logDropped == nil {
				return 0
			}
			return float64(s.logDropped())
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	s.tr.SetObserver(observer{m})
	return m
}

// handler serves the exposition.
func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:      promLog{m.s},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      m.reg,
	})
}

// tunnelStart counts a tunnel that began relaying on front.
func (m *metrics) tunnelStart(front string) { m.tunnelsActive.WithLabelValues(front).Inc() }

// tunnelEnd counts the end of a tunnel counted by tunnelStart. It must be
// called exactly once per tunnelStart (next to the registry's remove).
func (m *metrics) tunnelEnd(front string) { m.tunnelsActive.WithLabelValues(front).Dec() }

// requestStart counts a plain-HTTP forwarded request that began; each is
// followed by exactly one requestEnd.
func (m *metrics) requestStart() { m.forwarding.Add(1) }

// requestEnd counts the end of a request counted by requestStart.
func (m *metrics) requestEnd() { m.forwarding.Add(-1) }

// requestsInFlight returns the forwarded requests in progress now.
func (m *metrics) requestsInFlight() int64 { return m.forwarding.Load() }

// authFailure counts a wrong client password on front, answered
// "immediate" or "delayed" (authGuard).
func (m *metrics) authFailure(front, answer string) {
	m.authFailures.WithLabelValues(front, answer).Inc()
}

// tunnelDone counts one finished client connection or forwarded request
// with its outcome, whether or not a tunnel was started for it.
func (m *metrics) tunnelDone(front, outcome string) {
	m.tunnelsTotal.WithLabelValues(front, outcome).Inc()
}

// bytes counts relayed bytes: up is client to upstream, down the reverse.
func (m *metrics) bytes(up, down int64) {
	if up > 0 {
		m.bytesTotal.WithLabelValues("up").Add(float64(up))
	}
	if down > 0 {
		m.bytesTotal.WithLabelValues("down").Add(float64(down))
	}
}

// dialLatency observes the set-up time of an established tunnel
// (upstream.Lease.Setup: waits and failed attempts included).
func (m *metrics) dialLatency(d time.Duration) { m.dialSeconds.Observe(d.Seconds()) }

// observer receives the tracker's events. Its methods run outside the
// tracker's locks and must stay cheap: a counter and a non-blocking send.
type observer struct{ m *metrics }

var _ health.Observer = observer{}

func (o observer) Transition(name string, tr health.Transition) {
	if tr.Target != "" {
		o.m.targetCools.WithLabelValues(tr.Reason.String()).Inc()
	} else {
		o.m.transitions.WithLabelValues(tr.From.String(), tr.To.String()).Inc()
	}
	o.m.persist.kick()
}

func (o observer) Probe(name string, ok bool, d time.Duration) {
	result := "failed"
	if ok {
		result = "ok"
	}
	o.m.probeSeconds.WithLabelValues(result).Observe(d.Seconds())
}

// poolCollector reads per-upstream health from the tracker at scrape time.
type poolCollector struct {
	s     *Server
	books *failureBooks
}

// classStage is a label pair of rotor_failures_total.
type classStage struct {
	c health.Class
	s health.Stage
}

// failureBooks keeps rotor_failures_total, the pool-wide failure counter,
// from going down when a reload removes an upstream (bug: the total was
// the live records' sum, so it fell by the removed one's failures and
// rate() read a reset). The failures of a removed upstream are carried
// into the total at the reload that removes it (reload), once, so that
// no scrape timing can lose them: they were added at the next scrape,
// from the record the tracker keeps 15 minutes, and a scrape gap over
// those minutes spanning the removal lost them (the counter went down).
// An upstream put back while the tracker keeps its record gets its
// counts back in the live sums: reload takes them out of the carried
// ones then, so they count once.
type failureBooks struct {
	mu sync.Mutex
	// mu guards the fields below. A scrape (Collect) holds it across its
	// sum of the live records and reload across the pool's update, so no
	// scrape sees a removed upstream's failures both live and carried, or
	// neither.
	//
	// carried are the counts of removed upstreams.
	carried map[classStage]uint64
	// byKey are those of the removed upstreams whose record the tracker
	// may still give back, by key: they leave carried when it does.
	byKey map[string]keptFailures
}

type keptFailures struct {
	counts []health.FailureCount
	at     time.Time // the tracker's clock at the removal
}

// removedKeep is how long the tracker keeps a removed upstream's record
// (health's goneKeep): one back in the config within it gets it back.
const removedKeep = 15 * time.Minute

// reload runs update, the pool's update from the endpoint set old to the
// one update returns, and carries the failures of the upstreams it
// removed into the books (and out of them for one whose kept record it
// gave back). now is tr's clock.
func (b *failureBooks) reload(tr *health.Tracker, old []*upstream.Endpoint, now time.Time, update func() ([]*upstream.Endpoint, error)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, kf := range b.byKey {
		if now.Sub(kf.at) >= removedKeep {
			delete(b.byKey, k) // the tracker forgot it: carried for good
		}
	}
	// Which of those the tracker still keeps, before the update gives
	// them back.
	var keptBefore map[string]bool
	if len(b.byKey) > 0 {
		keptBefore = map[string]bool{}
		for _, g := range tr.ExportRemoved() {
			keptBefore[g.Snapshot.Key] = true
		}
	}
	eps, err := update()
	if err != nil {
		return err
	}
	oldKeys := make(map[string]*upstream.Endpoint, len(old))
	for _, e := range old {
		oldKeys[e.Key] = e
	}
	newKeys := make(map[string]bool, len(eps))
	for _, e := range eps {
		newKeys[e.Key] = true
		kf, ok := b.byKey[e.Key]
		if !ok || oldKeys[e.Key] != nil {
			continue
		}
		delete(b.byKey, e.Key)
		// Back: its record holds the carried counts again when the
		// tracker gave it back. A new record (the tracker had let the
		// old one go) starts from none, and they stay carried.
		if keptBefore[e.Key] && holds(tr.Stats(e.Record(), nil).Counts, kf.counts) {
			for _, fc := range kf.counts {
				b.carried[classStage{fc.Class, fc.Stage}] -= fc.N
			}
		}
	}
	var gone map[string]health.Removed
	for _, e := range old {
		if newKeys[e.Key] {
			continue
		}
		if gone == nil {
			gone = map[string]health.Removed{}
			for _, g := range tr.ExportRemoved() {
				gone[g.Snapshot.Key] = g
			}
		}
		// What the tracker keeps is what it gives back; a record it did
		// not keep (over its bound) is read as it is.
		counts := tr.Stats(e.Record(), nil).Counts
		g, kept := gone[e.Key]
		if kept {
			counts = g.Snapshot.Counts
		}
		if len(counts) == 0 {
			continue
		}
		if b.carried == nil {
			b.carried = map[classStage]uint64{}
		}
		for _, fc := range counts {
			b.carried[classStage{fc.Class, fc.Stage}] += fc.N
		}
		if kept {
			if b.byKey == nil {
				b.byKey = map[string]keptFailures{}
			}
			b.byKey[e.Key] = keptFailures{counts: slices.Clone(counts), at: now}
		}
	}
	return nil
}

// holds tells whether have counts at least want's, label by label.
func holds(have, want []health.FailureCount) bool {
	for _, w := range want {
		i := slices.IndexFunc(have, func(h health.FailureCount) bool { return h.Class == w.Class && h.Stage == w.Stage })
		if i < 0 || have[i].N < w.N {
			return false
		}
	}
	return true
}

// addCarried puts the carried counts into pool, the live records' sums.
// The caller holds b.mu.
func (b *failureBooks) addCarried(pool map[classStage]uint64) {
	for k, n := range b.carried {
		if n > 0 {
			pool[k] += n
		}
	}
}

var (
	descUpstreams = prometheus.NewDesc("rotor_upstreams",
		"Upstreams per state (eligible, cooling, probe_allowed, disabled).", []string{"state"}, nil)
	descPoolFailures = prometheus.NewDesc("rotor_failures_total",
		"Failures observed across the pool, by class and stage: the sum of rotor_upstream_failures_total, and the failures of upstreams removed since the start.", []string{"class", "stage"}, nil)
	descFailures = prometheus.NewDesc("rotor_upstream_failures_total",
		"Failures observed per upstream, by class and stage.", []string{"upstream", "class", "stage"}, nil)
	descProbes = prometheus.NewDesc("rotor_probes_total",
		"Health probes finished per upstream, by result (ok, failed).", []string{"upstream", "result"}, nil)
	descSuccesses = prometheus.NewDesc("rotor_upstream_successes_total",
		"Successful uses of an upstream (tunnels established, responses relayed).", []string{"upstream"}, nil)
	descActive = prometheus.NewDesc("rotor_upstream_active",
		"Tunnels open through an upstream now.", []string{"upstream"}, nil)
	descState = prometheus.NewDesc("rotor_upstream_state",
		"1 for the state an upstream is in, 0 for the others.", []string{"upstream", "state"}, nil)
	descTargets = prometheus.NewDesc("rotor_upstream_target_cooldowns",
		"Per-target cooldowns active on an upstream now.", []string{"upstream"}, nil)
	// descLatency is the figure the admin API shows as latency_ms. An
	// upstream with no sample has no series: 0 would read as the fastest
	// one, NaN breaks aggregations.
	descLatency = prometheus.NewDesc("rotor_upstream_latency_seconds",
		"Smoothed set-up time of an upstream's tunnels (TCP connect and proxy handshake, which waits on the target's connect), as lowest-latency picks by and the admin API shows as latency_ms; absent until a tunnel measured one.", []string{"upstream"}, nil)
)

func (poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUpstreams, descPoolFailures, descFailures, descProbes, descSuccesses, descActive, descState, descTargets, descLatency} {
		ch <- d
	}
}

// Collect emits one consistent pass over the pool: the pool-wide series
// always, the per-upstream ones while the pool is within
// metrics.per_upstream_limit. Two endpoints sharing a display name
// (possible with list files) are summed under it rather than breaking the
// scrape with duplicate series; their latencies, which do not add up, are
// averaged over those measured.
func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ a, b, c string }
	counters := map[*prometheus.Desc]map[key]float64{}
	gauges := map[*prometheus.Desc]map[key]float64{}
	add := func(m map[*prometheus.Desc]map[key]float64, d *prometheus.Desc, k key, v float64) {
		if m[d] == nil {
			m[d] = map[key]float64{}
		}
		m[d][k] += v
	}
	// Held across the sum of the live records: a reload (books.reload)
	// moves a removed upstream's failures from them to the carried ones.
	c.books.mu.Lock()
	defer c.books.mu.Unlock()
	eps := c.s.pool.Endpoints()
	perUpstream := c.s.cfg.Load().Metrics.perUpstream(len(eps))
	states := map[health.State]int{}
	pool := map[classStage]uint64{}
	type mean struct {
		sum float64
		n   int
	}
	latency := map[string]mean{}
	var buf []health.FailureCount
	for _, e := range eps {
		st := c.s.tr.Stats(e.Record(), buf[:0])
		buf = st.Counts
		states[st.State]++
		for _, fc := range st.Counts {
			pool[classStage{fc.Class, fc.Stage}] += fc.N
		}
		if !perUpstream {
			continue
		}
		n := e.Name
		for _, fc := range st.Counts {
			add(counters, descFailures, key{n, fc.Class.String(), fc.Stage.String()}, float64(fc.N))
		}
		add(counters, descProbes, key{n, "ok", ""}, float64(st.ProbesOK))
		add(counters, descProbes, key{n, "failed", ""}, float64(st.ProbesFailed))
		add(counters, descSuccesses, key{n, "", ""}, float64(st.Successes))
		add(gauges, descActive, key{n, "", ""}, float64(e.Active()))
		add(gauges, descTargets, key{n, "", ""}, float64(st.Targets))
		if d := e.Latency(); d > 0 {
			l := latency[n]
			latency[n] = mean{l.sum + d.Seconds(), l.n + 1}
		}
		for _, s := range health.AllStates() {
			v := 0.0
			if s == st.State {
				v = 1
			}
			add(gauges, descState, key{n, s.String(), ""}, v)
		}
	}
	c.books.addCarried(pool)
	for _, st := range health.AllStates() {
		ch <- prometheus.MustNewConstMetric(descUpstreams, prometheus.GaugeValue, float64(states[st]), st.String())
	}
	for k, n := range pool {
		ch <- prometheus.MustNewConstMetric(descPoolFailures, prometheus.CounterValue, float64(n), k.c.String(), k.s.String())
	}
	emit := func(m map[*prometheus.Desc]map[key]float64, t prometheus.ValueType) {
		for d, series := range m {
			for k, v := range series {
				labels := []string{k.a}
				switch d {
				case descFailures:
					labels = append(labels, k.b, k.c)
				case descProbes, descState:
					labels = append(labels, k.b)
				}
				ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
			}
		}
	}
	emit(counters, prometheus.CounterValue)
	emit(gauges, prometheus.GaugeValue)
	for n, l := range latency {
		ch <- prometheus.MustNewConstMetric(descLatency, prometheus.GaugeValue, l.sum/float64(l.n), n)
	}
}

// promLog routes promhttp's error lines to zerolog.
type promLog struct{ s *Server }

func (l promLog) Println(v ...any) {
	l.s.log.Error().Str("listener", "admin").Str(errField, fmt.Sprint(v...)).Msg("metrics exposition")
}
