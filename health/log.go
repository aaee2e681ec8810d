package health

// Log fields used by this package (the vocabulary is rotor's, STYLE 49):
// upstream (display name, already free of credentials), from, to, class,
// stage, until (RFC 3339 wall clock), target (host of a per-target
// cooldown) and err. Dialers and URLs are never logged.

// logChange logs one transition at info. It runs after every lock is
// released (STYLE 40).
func (t *Tracker) logChange(c change) {
	ev := t.log.Info()
	if !ev.Enabled() {
		return
	}
	ev = ev.Str("upstream", c.name)
	if c.restored {
		ev = ev.Stringer("state", c.tr.To)
	} else {
		ev = ev.Stringer("from", c.tr.From).Stringer("to", c.tr.To)
	}
	// operator is the reason of an operator's (or the config's) act, no
	// failure class: such a line has stage operator and no class.
	if c.tr.Reason != ClassNone && c.tr.Reason != Operator {
		ev = ev.Stringer("class", c.tr.Reason)
	}
	if c.tr.Stage != StageNone {
		ev = ev.Stringer("stage", c.tr.Stage)
	}
	// The history entry's detail says why when no error does: the
	// operator's reason, "cooldown ended" (the class and stage are then
	// the failure it cooled for, not a probe's), "probe passed". The
	// lines dropped it, so an operator's disable lost its reason.
	if c.err == nil && !c.restored && c.tr.Detail != "" {
		ev = ev.Str("detail", c.tr.Detail)
	}
	if !c.until.IsZero() {
		ev = ev.Time("until", c.until)
	}
	if c.err != nil {
		ev = ev.Err(c.err)
	}
	switch {
	case c.restored:
		ev.Str("detail", c.tr.Detail).Msg("upstream record restored")
	case c.tr.Target != "":
		ev.Str("target", c.tr.Target).Msg("upstream cooled for target")
	case c.tr.From == c.tr.To && c.tr.To == Disabled:
		ev.Msg("upstream disable recorded, state unchanged") // an operator's, over the config's
	case c.tr.From == c.tr.To && c.tr.To == Cooling:
		ev.Msg("upstream cooldown updated") // a peer's cooling over this one's
	case c.tr.From == c.tr.To:
		ev.Msg("upstream enable recorded, state unchanged") // enabledHere
	case c.remote:
		// Another instance's transition (its probe, its failure): the
		// detail names it ("probe passed (instance a)"); this instance
		// did not probe.
		ev.Str("detail", c.tr.Detail).Msg("upstream state adopted from the fleet")
	default:
		ev.Msg("upstream state changed")
	}
}
