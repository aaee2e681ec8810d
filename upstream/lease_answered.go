package upstream

// Answered reports that the tunnel got a byte back from its target (the
// first one): the target speaks through this upstream. Health weighs a
// tunnel's first-byte silence against the upstream only on such evidence
// from other upstreams (health.Tracker.Answered), since a silent tunnel
// alone cannot tell a silent proxy from a tarpit target. Call it at most
// once per tunnel; it is cheap (no lock in the common case).
func (l *Lease) Answered() {
	if l.key == "" {
		return
	}
	l.pool.tr.Answered(l.Endpoint.rec, l.key)
}
