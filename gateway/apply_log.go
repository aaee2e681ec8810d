package gateway

// What a config load changed, told to the operator (apply): upstreams
// added and removed (one line each for a few, one summary for a seller
// list of thousands), a long wait for first probes, and the per-upstream
// metrics cap.

import (
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// changedLogEach is the most upstreams one config load adds (or removes)
// that are logged one line each; more are summarised in one line.
const changedLogEach = 20

// logApplied logs what apply changed. before maps the names of the
// upstreams before the update to their states then (statesByName).
func (s *Server) logApplied(cfg *Config, added, removed []string, before map[string]string) {
	now := make(map[string]string, len(added))
	waiting := 0
	for _, n := range added {
		st := "unknown"
		if e := s.pool.Lookup(n); e != nil {
			state, _ := s.tr.Status(e.Record())
			st = state.String()
			if state == health.ProbeAllowed {
				waiting++
			}
		}
		now[n] = st
	}
	// Removals first: an upstream replaced by another of the same name
	// (host:port with another user) read "added X", then "removed X", as
	// if X were gone.
	s.logChanged(removed, before, "from", "upstream removed from config", "upstreams removed from config")
	s.logChanged(added, now, "to", "upstream added", "upstreams added")
	s.warnProbeBacklog(cfg, waiting)
	s.noteMetricsCap(cfg, len(s.pool.Endpoints()))
}

// logRenamed logs the upstreams that kept their record under a new name
// (the same identity, a new name in the config): the API, metrics and the
// logs switch to the new name, and without a line an operator could not
// tell where the old one went. A few one line each, many in one summary.
func (s *Server) logRenamed(old, now []*upstream.Endpoint) {
	was := make(map[string]string, len(old))
	for _, e := range old {
		was[e.Key] = e.Name
	}
	var from, to []string
	for _, e := range now {
		if n, ok := was[e.Key]; ok && n != e.Name {
			from, to = append(from, n), append(to, e.Name)
		}
	}
	if len(to) == 0 {
		return
	}
	if len(to) <= changedLogEach {
		for i := range to {
			s.log.Info().Str("upstream", to[i]).Str("was", from[i]).Msg("upstream renamed: record kept")
		}
		return
	}
	s.log.Info().Int("upstreams", len(to)).Strs("first", to[:5]).Strs("were", from[:5]).Msg("upstreams renamed: records kept")
}

// statesByName maps each upstream's name to its state now, for logging
// the state removed upstreams were in.
func (s *Server) statesByName() map[string]string {
	eps := s.pool.Endpoints()
	out := make(map[string]string, len(eps))
	for _, e := range eps {
		st, _ := s.tr.Status(e.Record())
		out[e.Name] = st.String()
	}
	return out
}

// logChanged logs names one line each (with state[name] under key) when
// they are few, else one summary line with the count, the first five and
// the count per state: replacing a seller list would otherwise log
// hundreds of thousands of lines. Removals (key "from") are operator
// actions and say so: stage operator, and no class (no failure).
func (s *Server) logChanged(names []string, state map[string]string, key, one, many string) {
	if len(names) == 0 {
		return
	}
	if len(names) <= changedLogEach {
		for _, n := range names {
			ev := s.log.Info().Str("upstream", n).Str(key, state[n])
			if key == "from" {
				ev = ev.Str("stage", health.StageOperator.String())
			}
			ev.Msg(one)
		}
		return
	}
	count := map[string]int{}
	for _, n := range names {
		count[state[n]]++
	}
	ev := s.log.Info().Int("upstreams", len(names)).Strs("first", names[:5])
	for _, st := range health.AllStates() {
		if c := count[st.String()]; c > 0 {
			ev = ev.Int(st.String(), c)
		}
	}
	if key == "from" {
		ev = ev.Str("stage", health.StageOperator.String())
	}
	ev.Msg(many)
}

// probeBacklogWarn is how long new upstreams may wait for their first
// probe before apply warns about it.
const probeBacklogWarn = time.Minute

// warnProbeBacklog tells the operator when the waiting new upstreams will
// be slow to serve: each waits for a first probe, and probes start at most
// probe.rate per second, so a seller list of thousands is admitted over
// many minutes (its first upstreams serve within a second). A warning,
// since the pool's capacity is far below what the file suggests until then.
func (s *Server) warnProbeBacklog(cfg *Config, waiting int) {
	if cfg.Pool.StartEligible || waiting == 0 {
		return
	}
	rate := cfg.Probe.Rate
	if rate <= 0 {
		rate = health.DefaultProbeRate
	}
	eta := time.Duration(float64(waiting) / rate * float64(time.Second)).Round(time.Second)
	if eta < probeBacklogWarn {
		return
	}
	s.log.Warn().Int("upstreams", waiting).Float64("probe_rate", rate).Str("at_least", eta.String()).
		Msg("new upstreams serve only after a first probe, started at most probe.rate per second: " +
			"raise probe.rate and probe.max_concurrent, or set pool.start_eligible = true to admit them unprobed")
}

// noteMetricsCap logs when the pool's size turns the per-upstream series
// of /metrics off or back on (metrics.per_upstream_limit).
func (s *Server) noteMetricsCap(cfg *Config, n int) {
	capped := !cfg.Metrics.perUpstream(n)
	if s.metricsCapped.Swap(capped) == capped {
		return
	}
	if capped {
		s.log.Warn().Int("upstreams", n).Int("per_upstream_limit", cfg.Metrics.PerUpstreamLimit).
			Msg("per-upstream metrics are off: the pool is larger than metrics.per_upstream_limit (pool-wide series stay; 0 lifts the limit)")
		return
	}
	s.log.Info().Int("upstreams", n).Msg("per-upstream metrics are on again")
}
