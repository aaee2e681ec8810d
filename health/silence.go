package health

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// First-byte silence of a tunnel (issue: tarpit targets). A tunnel whose
// client sent bytes and got none back within slow_body.first_byte was
// slow_body at first_byte against the upstream, so any client could cool
// a healthy upstream by tunnelling to a host that accepts and never
// answers, and a scraper hitting one slow site cooled the pool one
// upstream after another. One tunnel cannot tell a silent upstream from
// a silent target: the proxy answered CONNECT, and what follows is the
// target's to send.
//
// So a silence (Failure.Scope ScopeTarget on slow_body at first_byte, as
// the gateway reports a tunnel's) cools its upstream for the target's host
// only, and counts against the upstream whole only on evidence, read from
// a second table of the records whose tunnels got a byte back from a
// host:port (Tracker.Answered; a CONNECT that succeeded is no such
// evidence):
//
//   - the silence rule: r was silent at Config.TargetRuleHosts distinct
//     hosts within Config.TargetRuleWindow that answered through other
//     records after r's silence there, while no other record was silent
//     there in the window (a host slow for everyone says nothing about r);
//     r then cools as slow_body at first_byte;
//   - r silent again at a host:port that answered through another record
//     since r's earlier silence there in the window (and no other record
//     was silent there): a slow_body failure of r's as any other, under
//     the [slow_body] policy and scope.
//
// A host silent through every upstream so ends up cooled for each of
// them (its tunnels are refused, "cooling for this host only"), and none
// of them cools whole. A tunnel of r's that got a byte back from a
// host:port answers r's own silences there.

// silentAtTarget reports whether f is a tunnel's first-byte silence that
// the target may owe (see above): slow_body at first_byte, scoped to its
// target by the reporter.
func silentAtTarget(f *Failure) bool {
	return f.Class == SlowBody && f.Stage == StageFirstByte && f.Scope == ScopeTarget
}

// silent applies f, a first-byte silence (silentAtTarget), to r: the
// host's cooldown always (in any state of r, as other target-scoped
// failures), r's own only on the evidence the silence rule weighs, while
// r is live. observed is false for a failure that is no new observation
// at the target. Caller holds r.mu.
func (t *Tracker) silent(s *settings, r *Record, now time.Time, f *Failure, live, observed bool, e *effects) {
	t.coolTarget(s, r, now, SlowBody, StageFirstByte, targetHost(f.Target), detailOf(f.Err), f.Err, e)
	if !live {
		return
	}
	hosts, again := t.silenceRule(s, r, now, f.Target, observed)
	switch {
	case s.cfg.TargetRuleHosts >= 0 && hosts >= s.cfg.TargetRuleHosts:
		r.silences = nil
		r.nsilent.Store(0)
		r.consec[SlowBody]++
		r.pending.Store(true)
		detail := fmt.Sprintf("silent tunnels to %d hosts that answer through other upstreams", hosts)
		t.cool(s, r, now, SlowBody, StageFirstByte, detail, errors.New(detail), e)
	case again && s.scope(SlowBody) == ScopeUpstream:
		pol := s.policy.For(SlowBody)
		r.after[SlowBody]++
		r.consec[SlowBody]++
		r.pending.Store(true)
		if r.after[SlowBody] >= pol.After || pol.PermanentAfter > 0 && r.consec[SlowBody] >= pol.PermanentAfter {
			detail := fmt.Sprintf("silent again at %s, which answers through other upstreams", f.Target)
			t.cool(s, r, now, SlowBody, StageFirstByte, detail, errors.New(detail), e)
		}
	}
}

// silenceRule records r's silence at target (a host:port) and weighs the
// evidence against r, as targetRule weighs target failures but against
// the table of answers: it returns how many distinct hosts r was silent at
// within the window that answered through another record after r's
// silence there (no other record silent there within the window), and
// whether target itself is one of them, answered since an earlier silence
// of r's there (not this one). A target without a port never counts.
// Caller holds r.mu.
func (t *Tracker) silenceRule(s *settings, r *Record, now time.Time, target string, observed bool) (hosts int, again bool) {
	if targetHost(target) == target {
		return 0, false
	}
	if observed {
		// Unlike targetSeen.fail's callers, noted even for a host
		// nobody answered yet: a host silent through two records before
		// anyone's answer is slow for everyone, and that answer must not
		// count against either (failedByOther).
		if _, ok := t.answered.m.Load(target); !ok {
			t.answered.add(target)
		}
		t.answered.fail(target, r, now)
	}
	keep, n, again := noteTargetFail(r.silences, target, now, s.cfg.TargetRuleWindow, &t.answered, r)
	r.silences = keep
	r.nsilent.Store(int32(len(keep)))
	return n, again
}

// Answered records that a tunnel of r's to target (host:port) got a byte
// back from it: the target speaks through r. It is the silence rule's
// evidence (see silent), it answers r's own recent silences at target,
// and it restarts the streak of r's expired silence cooldown for its host
// (a CONNECT that went through does not: see clearedBy). Call it once per
// tunnel, at its first byte from the upstream side. Like SuccessTarget it
// writes no shared memory in the common case (targetSeen.note), and takes
// r's lock only while r has silences or per-host cooldowns on record.
func (t *Tracker) Answered(r *Record, target string) {
	if targetHost(target) == target {
		return
	}
	now := t.clock.Now()
	s := t.settings()
	win := s.cfg.TargetRuleWindow
	t.answered.note(target, r, now, win/seenFreshDiv)
	if r.nsilent.Load() == 0 && r.ntargets.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.silences) > 0 {
		r.silences = slices.DeleteFunc(r.silences, func(f targetFail) bool {
			return f.target == target || now.Sub(f.at) >= win
		})
		r.nsilent.Store(int32(len(r.silences)))
	}
	endStreaks(s, r, target, now, proofBytes)
}
