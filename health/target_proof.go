package health

import "time"

// What ends a per-host cooldown's streak (issue: tarpits). An expired
// per-host entry used to be dropped at any success for its host, so its
// next cooling was a first one again. But the success that follows a
// per-host cooling is nearly always a CONNECT that went through (the next
// tunnel to that host), and that proves only that the upstream gets
// there: a tarpit accepts and never answers, a site banning the exit
// answers every tunnel with its ban page, and a proxy refusing CONNECT to
// a port still serves plain GETs to it. Each of them cost one failed
// tunnel per base cooldown per upstream, forever, at the base cooldown
// every time.
//
// So a success ends a streak only when it disproves what the entry was
// for (clearedBy); otherwise the streak grows per [cooldown.<class>] up to
// its max, as any other cooldown does. An entry whose cooldown ended over
// its class's max ago starts over at its next failure (decayed): nothing
// may ever disprove a ban seen through tunnels, and a host that bans once
// a week should not be at the max for it.

// proof is what a success shows about its target, for clearedBy.
type proof uint8

const (
	// proofReached: a tunnel to it was set up (the proxy answered CONNECT,
	// SOCKS5 reply 0): the upstream gets there (SuccessTarget).
	proofReached proof = 1 << iota
	// proofBytes: a tunnel's first byte back from it: the host answers
	// through the upstream (Answered).
	proofBytes
	// proofServed: a forwarded plain-HTTP answer from it that is no ban
	// status: it serves through the upstream (SuccessServed).
	proofServed
)

// clearedBy returns the proofs that end the streak of a per-host entry
// that cooled as class at stage:
//
//   - a first-byte silence (a tarpit, a slow site): a byte back, or a
//     forwarded answer; not a CONNECT that went through;
//   - a body that stalls after its first byte: nothing (the stalled
//     tunnel had its CONNECT and its first byte), so only decay;
//   - a ban (target_http_error), a forwarded 407 (auth_rejected for that
//     host only) and any other forwarded answer's failure (stage
//     http_status: squid's error pages for that host): a forwarded answer
//     that is none of those; a CONNECT or a tunnel's bytes (a ban page is
//     bytes too) say nothing of what the site answers;
//   - a refusal of CONNECT by the proxy's policy (stage proxy_handshake: a
//     403, stock squid's SSL_ports): a CONNECT that goes through; a
//     forwarded GET to that port says nothing of CONNECT;
//   - the rest (the proxy cannot reach the host or port: SOCKS5 replies 1
//     and 2, a gateway's 502/503, target failures at a host:port others
//     reach): the upstream reaching it, by a tunnel or a forwarded answer.
func clearedBy(class Class, stage Stage) proof {
	switch {
	case class == SlowBody && stage == StageFirstByte:
		return proofBytes | proofServed
	case class == SlowBody:
		return 0
	case class == TargetHTTPError, class == AuthRejected, stage == StageHTTPStatus:
		return proofServed
	case stage == StageProxyHandshake:
		return proofReached
	}
	return proofReached | proofServed
}

// SuccessServed is SuccessTarget for a forwarded plain-HTTP answer from
// target (host:port) that is no ban: besides what a tunnel's success
// shows, the site served through r, which ends the streaks of r's expired
// bans, per-host auth_rejected and silences for its host (see clearedBy).
func (t *Tracker) SuccessServed(r *Record, target string) { t.successTarget(r, target, proofServed) }

// successTarget is SuccessTarget and SuccessServed, p saying which.
func (t *Tracker) successTarget(r *Record, host string, p proof) {
	now := t.clock.Now()
	t.success(r, now)
	if host == "" {
		return
	}
	s := t.settings()
	win := s.cfg.TargetRuleWindow
	t.seen.note(host, r, now, win/seenFreshDiv)
	if r.ntargets.Load() > 0 || r.nfails.Load() > 0 {
		t.forgetTarget(s, r, host, now, p)
	}
}

// endStreaks drops the expired entries of target's host and of target (a
// host:port) that p disproves (clearedBy), or that decayed: their next
// cooling is a first one. Dropping a decayed one also lets r's gate open
// again (no per-target entry left) for a host still in use. An entry
// still cooling is kept: the success came from a tunnel opened before the
// ban. Caller holds r.mu.
func endStreaks(s *settings, r *Record, target string, now time.Time, p proof) {
	n := len(r.targets)
	for _, k := range [2]string{targetHost(target), target} {
		tc := r.targets[k]
		if tc != nil && !now.Before(tc.deadline) && (clearedBy(tc.reason, tc.stage)&p != 0 || s.decayed(tc, now)) {
			delete(r.targets, k)
		}
	}
	if len(r.targets) != n {
		r.ntargets.Store(int32(len(r.targets)))
		r.publish()
	}
}

// decayed reports whether tc's cooldown ended at least its class's max
// ago (for an entry that never cooled, whose failures are still below
// `after`: its first failure was that long ago): its next failure starts
// over (see above).
func (s *settings) decayed(tc *targetCooldown, now time.Time) bool {
	end := tc.deadline
	if tc.streak == 0 {
		end = tc.set
	}
	return (tc.streak > 0 || tc.after > 0) && !now.Before(end.Add(s.policy.For(tc.reason).Max))
}
