package health

import (
	"math/rand/v2"
	"slices"
	"time"
)

// settings is one generation of a tracker's configuration, resolved and
// ready to use. It is immutable once published: a reload (SetConfig)
// builds a new one and swaps the pointer (STYLE 17), so a reader that
// loads it once per operation sees one consistent generation without a
// lock, and the pick and success paths stay lock-free.
type settings struct {
	cfg    Config // defaults filled
	policy Policy
	probe  *probeSpec // nil when Probe.URL is empty (or unusable)
	// probeErr is why probe is nil although Probe.URL is set.
	probeErr error
	rand     func() float64
	// interval is the minimum spacing of probe starts (1/Probe.Rate).
	interval time.Duration
}

// newSettings resolves cfg (defaults filled here) into a settings value.
func newSettings(cfg Config) *settings {
	cfg = cfg.withDefaults()
	// Own the slice: the caller may reuse its Config.
	cfg.Probe.ExpectStatus = slices.Clone(cfg.Probe.ExpectStatus)
	s := &settings{
		cfg:      cfg,
		policy:   policyOf(cfg.Cooldown),
		rand:     cfg.Rand,
		interval: time.Duration(float64(time.Second) / cfg.Probe.Rate),
	}
	if s.rand == nil {
		s.rand = rand.Float64
	}
	s.probe, s.probeErr = newProbeSpec(cfg.Probe)
	return s
}

// settings returns the current generation. Callers load it once per
// operation and pass it down, so one operation never mixes two reloads.
func (t *Tracker) settings() *settings { return t.set.Load() }

// SetConfig replaces the tracker's configuration at run time (a config
// reload, issue 6). cfg is validated first; when invalid, the error is
// returned and the running configuration stays in force. Otherwise cfg is
// copied, its defaults are filled, and it is swapped in atomically: every
// operation that starts afterwards uses it, none sees half of it.
//
// What changes, and when:
//
//   - Failures reported from now on use the new cooldown policy, scopes,
//     permanent_after and target-failure rule. Cooldowns already running
//     (the record's and per-target ones) keep the deadlines recorded when
//     they started; they are not shortened or extended. A record's
//     cooldown streak carries over, so its next cooling is the new Base ×
//     Multiplier^streak, capped at the new Max.
//   - The prober uses the new probe URL, expectations and timeout for the
//     next probe it starts; probes in flight finish under the old ones.
//     Probe.Rate and Probe.MaxConcurrent apply to the next start, counting
//     the probes already in flight and spacing from the last start. An
//     emptied Probe.URL re-admits records waiting for a probe at once,
//     as NewTracker's would. The prober is woken, so the change applies
//     without waiting for its next deadline.
//   - Slow-start ramps in progress follow the new SlowStart and
//     SlowStartRate from their next admission; waiters are woken to
//     re-check.
//   - StartEligible and HistoryLen affect only records added later;
//     MaxTargets applies at a record's next per-target cooldown (and
//     Restore).
//
// Records, their states, counters and history are kept. SetConfig is safe
// for concurrent use with every other method; concurrent SetConfig calls
// take effect in some order, the last one wins.
func (t *Tracker) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s := newSettings(cfg)
	if s.probeErr != nil {
		return s.probeErr // Validate parses the URL too; kept for safety
	}
	old := t.set.Swap(s)
	t.log.Info().Msg("health config updated")
	if s.probe == nil && old.probe != nil && t.running.Load() {
		t.log.Warn().Str("stage", StageProbe.String()).Msg("no probe url: records are re-admitted without a probe")
	}
	t.kickProber()
	t.broadcast()
	return nil
}

// kickProber wakes Run without blocking. kick has room for one pending
// wake-up, which is all Run needs: it re-reads everything when it wakes.
func (t *Tracker) kickProber() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}
