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
	if c.tr.Reason != ClassNone {
		ev = ev.Stringer("class", c.tr.Reason)
	}
	if c.tr.Stage != StageNone {
		ev = ev.Stringer("stage", c.tr.Stage)
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
