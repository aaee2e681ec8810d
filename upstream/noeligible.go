package upstream

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// ErrNoEligible is returned when no endpoint became eligible within
// pool.wait_for_upstream.
var ErrNoEligible = errors.New("no eligible upstream")

// NoEligibleError is the ErrNoEligible of a request whose wait expired,
// or that asked for tags no upstream has. A request restricted by tags,
// to a host some upstreams are banned for, or that found upstreams
// eligible but at their limits is told so, and so is one whose upstreams
// are out (cooling, by class, awaiting a probe, disabled: when the next
// one is due); otherwise its text is ErrNoEligible's (errors.Is(err,
// ErrNoEligible) holds either way). Its text never holds a failure's
// detail (what a peer sent): classes, counts and times only.
type NoEligibleError struct {
	Tags []string
	// Matching is how many endpoints of the set carry every tag (0: no
	// upstream is configured with them, a likely typo).
	Matching int
	// Host is the target host; HostCooling how many of the matching
	// endpoints are eligible but cooling for that host only (a ban a
	// target_http_error, retry status or refusal of it started), or for
	// its host:port only.
	Host        string
	HostCooling int
	// Target is the target's host:port; PortCooling how many of the
	// HostCooling cool for that host:port only, not the whole host (a
	// policy refusal of the port, health.ScopePort: CONNECT to another
	// port of the host may go through them). Issue: the text said "for
	// 127.0.0.1 … for this host only" while CONNECT to another port of it
	// worked.
	Target      string
	PortCooling int
	// HostClasses counts those by the class of their cooldown for the
	// host (in class order, none zero).
	HostClasses []ClassCount
	// AtMaxConns and AtRate count the matching endpoints that are
	// eligible (the admin API says so) but were at their max_conns, or
	// out of rate tokens (or had what was left promised to clients
	// waiting longer), when the wait expired.
	AtMaxConns int
	AtRate     int
	// Freed counts the matching endpoints eligible and free when the wait
	// expired, with a max_conns or rate limit: a slot or token came free
	// as the wait ended (issue: the text said such an upstream "is not
	// eligible", which /api/upstreams contradicted).
	Freed int
	// Cooling counts the matching endpoints cooling when the wait
	// expired, by the class of their last failure (in class order, none
	// zero); Probing those whose cooldown is over and whose probe is due
	// or running (probe_allowed); Disabled those disabled.
	Cooling  []ClassCount
	Probing  int
	Disabled int
	// NextDue is the shortest cooldown left among the cooling ones (0:
	// none cools).
	NextDue time.Duration
	// ProbeTargetDown counts the cooling ones whose probes failed at the
	// probe target itself (health's "probe target seems down"): then the
	// probe target, not the upstreams, seems to be the trouble.
	ProbeTargetDown int
	// Session and SessionUpstream are set when the request waited for the
	// upstream its sticky session is bound to, which stayed at its limits:
	// the session keeps it rather than change exit. The counts above then
	// cover that upstream alone (Matching 1, at max_conns or rate): the
	// others were not the request's to take.
	Session, SessionUpstream string
	// Wait is the pool.wait_for_upstream the request waited (a
	// nanosecond for "0s": no wait); 0 when it did not wait at all (tags
	// no upstream has).
	Wait time.Duration
}

// ClassCount is how many endpoints cool for one class.
type ClassCount struct {
	Class health.Class
	N     int
}

func (e *NoEligibleError) Error() string {
	tags := quoteTags(e.Tags)
	if len(e.Tags) > 0 && e.Matching == 0 {
		return "no eligible upstream: no upstream has tags " + tags
	}
	if e.SessionUpstream != "" {
		return "no eligible upstream: session " + e.Session + " keeps upstream " + e.SessionUpstream +
			", which stayed at its max_conns or rate limit (a new session id gets another upstream)"
	}
	busy := e.AtMaxConns + e.AtRate
	out := e.outText()
	what := fmt.Sprintf("the %d upstreams", e.Matching)
	if e.Matching == 1 {
		what = "the only upstream"
	}
	if len(e.Tags) > 0 {
		what += " with tags " + tags
	}
	if len(e.Tags) == 0 && e.HostCooling == 0 && busy == 0 && e.Freed == 0 {
		switch {
		case out == "":
			return ErrNoEligible.Error() // nothing to add
		case e.Matching == 1 && e.outCount() == 1:
			return "no eligible upstream: " + what + " is " + e.oneOut()
		}
		return "no eligible upstream: " + out
	}
	limit := "max_conns or rate limit"
	switch {
	case e.AtRate == 0:
		limit = "max_conns"
	case e.AtMaxConns == 0:
		limit = "rate limit"
	}
	if e.HostCooling > 0 {
		dest, scope := e.Host, "this host"
		switch {
		case e.Target == "" || e.PortCooling <= 0:
		case e.PortCooling >= e.HostCooling:
			dest, scope = e.Target, "this host:port"
		default:
			dest, scope = e.Target, "this host or this host:port"
		}
		msg := fmt.Sprintf("no eligible upstream for %s: %s cooling for %s only (%s)",
			dest, partOf(e.HostCooling, what, e.Matching), scope, e.hostWhy())
		switch {
		case busy == 1:
			msg += ", 1 is at its " + limit
		case busy > 1:
			msg += fmt.Sprintf(", %d are at their %s", busy, limit)
		}
		return msg + restOut(e.Matching-e.HostCooling-busy, out)
	}
	switch {
	case busy > 0 && busy == e.Matching && busy == 1:
		return fmt.Sprintf("no eligible upstream: %s is eligible but at its %s", what, limit)
	case busy > 0 && busy == e.Matching:
		return fmt.Sprintf("no eligible upstream: %s are eligible but all at their %s", what, limit)
	case busy > 0:
		return fmt.Sprintf("no eligible upstream: %s eligible but at %s %s%s", partOf(busy, what, e.Matching),
			pronoun(busy, "its", "their"), limit, restOut(e.Matching-busy, out))
	case e.Matching == 1 && out != "" && e.outCount() == 1:
		return fmt.Sprintf("no eligible upstream: %s is %s", what, e.oneOut())
	case e.Matching == 1 && e.Freed == 1:
		return fmt.Sprintf("no eligible upstream: %s is eligible; its limit freed a slot or token only as the wait ended", what)
	case e.Matching == 1:
		return fmt.Sprintf("no eligible upstream: %s is not eligible", what)
	case e.Freed > 0 && out == "":
		return fmt.Sprintf("no eligible upstream: %s eligible; their limits freed a slot or token only as the wait ended", partOf(e.Freed, what, e.Matching))
	case out != "":
		return fmt.Sprintf("no eligible upstream: none of %s is eligible: %s", what, out)
	}
	return fmt.Sprintf("no eligible upstream: none of %s is eligible", what)
}

// hostWhy says why the endpoints cool for the host: by class when
// counted ("auth_rejected ×2": a wrong proxy password is not the
// target's doing), else that the host refused or banned them.
func (e *NoEligibleError) hostWhy() string {
	if len(e.HostClasses) == 0 {
		return "it refused or banned " + pronoun(e.HostCooling, "it", "them")
	}
	return classList(e.HostClasses, e.HostCooling > 1)
}

// outCount is how many endpoints the state counts name.
func (e *NoEligibleError) outCount() int {
	n := e.Probing + e.Disabled
	for _, c := range e.Cooling {
		n += c.N
	}
	return n
}

// outText says why the endpoints out are out, in one line: "2 cooling
// (refused ×1, auth_rejected ×1), 1 disabled; next one due in 25s" ("" when
// no state was counted).
func (e *NoEligibleError) outText() string {
	var parts []string
	if n := e.outCount() - e.Probing - e.Disabled; n > 0 {
		parts = append(parts, fmt.Sprintf("%d cooling (%s)", n, e.classes(true)))
	}
	if e.Probing > 0 {
		parts = append(parts, fmt.Sprintf("%d awaiting a probe", e.Probing))
	}
	if e.Disabled > 0 {
		parts = append(parts, fmt.Sprintf("%d disabled", e.Disabled))
	}
	if len(parts) == 0 {
		return ""
	}
	return strings.Join(parts, ", ") + e.dueText("next one due in ")
}

// oneOut is outText for a single endpoint out: "cooling (refused); due
// in 25s", "awaiting a probe", "disabled".
func (e *NoEligibleError) oneOut() string {
	switch {
	case e.Probing == 1:
		return "awaiting a probe"
	case e.Disabled == 1:
		return "disabled"
	}
	return "cooling (" + e.classes(false) + ")" + e.dueText("due in ")
}

// classes lists the cooling classes, with their counts when counts.
func (e *NoEligibleError) classes(counts bool) string { return classList(e.Cooling, counts) }

// classList lists the classes of cc, with their counts when counts.
func classList(cc []ClassCount, counts bool) string {
	c := make([]string, len(cc))
	for i, cc := range cc {
		c[i] = cc.Class.String()
		if counts {
			c[i] += " ×" + strconv.Itoa(cc.N)
		}
	}
	return strings.Join(c, ", ")
}

// dueText is the probe target's trouble, if any, and when the next
// cooldown ends ("" when none cools), each after "; ".
func (e *NoEligibleError) dueText(lead string) string {
	s := ""
	if e.ProbeTargetDown > 0 {
		s += "; the probe target seems down"
	}
	if e.NextDue > 0 {
		// Whole seconds, rounded up: "due in 0s" read as due already.
		s += "; " + lead + ((e.NextDue + time.Second - 1) / time.Second * time.Second).String()
	}
	return s
}

// partOf names n of the matching endpoints (what) with its verb: "the
// only upstream is", "1 of the 4 upstreams is", "2 of the 3 upstreams
// are" ("the 1 upstreams are" read as a typo).
func partOf(n int, what string, matching int) string {
	switch {
	case matching == 1:
		return what + " is"
	case n == 1:
		return "1 of " + what + " is"
	}
	return fmt.Sprintf("%d of %s are", n, what)
}

// pronoun returns one for n == 1, else many.
func pronoun(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// restOut says that the n matching endpoints not counted otherwise are
// out ("" when there are none), and why when out says (outText).
func restOut(n int, out string) string {
	why := ""
	if out != "" {
		why = ": " + out
	}
	switch {
	case n <= 0:
		return ""
	case n == 1:
		return ", the other is out" + why
	}
	return ", the rest are out" + why
}

// quoteTags lists tags quoted ("us", "residential"): a tag with a
// trailing space or a case the upstreams do not use ("us ", "US") reads
// as itself, not as a tag that does not exist, and a client's control
// bytes are escaped.
func quoteTags(tags []string) string {
	q := make([]string, len(tags))
	for i, t := range tags {
		q[i] = strconv.Quote(t)
	}
	return strings.Join(q, ", ")
}

// Is makes errors.Is(err, ErrNoEligible) true.
func (e *NoEligibleError) Is(target error) bool { return target == ErrNoEligible }

// noEligible explains an expired wait: the tags asked for, the upstreams
// that are only cooling for this host, those eligible but at their
// max_conns or rate limit (or whose capacity clients waiting longer are
// to have), why the others are out (cooling, by class, awaiting a probe,
// disabled) and when the next one is due, and how long the request
// waited. It walks the request's view (the pool, without tags) once,
// after the client waited.
func (a *Attempts) noEligible() error {
	p, s := a.p, a.p.set.Load()
	host := a.req.Host()
	ne := &NoEligibleError{Tags: a.req.Tags, Host: host, Wait: a.cfg.WaitForUpstream}
	if e := a.sessBusy; e != nil {
		ne.Session, ne.SessionUpstream, ne.Matching = a.req.Session, e.Name, 1
		if a.rateWait > 0 {
			ne.AtRate = 1
		} else {
			ne.AtMaxConns = 1
		}
		return ne
	}
	// keyHost is the host of a.key, the name the host's own cooldowns
	// are filed under (health's targetHost): a cooldown found for a.key
	// but not for it is of the host:port only.
	keyHost := a.key
	if h, _, err := net.SplitHostPort(a.key); err == nil {
		keyHost = h
		ne.Target = a.key
	}
	share := p.share.Load()
	var cooling, hostCooling [16]int // by class; health has fewer
	count := func(e *Endpoint) {
		if !e.HasTags(a.req.Tags) {
			return
		}
		ne.Matching++
		if e.rec == nil {
			return
		}
		if !p.tr.Eligible(e.rec) {
			o := p.tr.Outlook(e.rec)
			switch o.State {
			case health.Cooling:
				if int(o.Reason) < len(cooling) {
					cooling[o.Reason]++
				}
				if ne.NextDue == 0 || o.Left < ne.NextDue {
					ne.NextDue = max(o.Left, time.Nanosecond)
				}
				if o.ProbeTargetDown {
					ne.ProbeTargetDown++
				}
			case health.ProbeAllowed:
				ne.Probing++
			case health.Disabled:
				ne.Disabled++
			}
			return
		}
		class, hostCool := health.Class(0), false
		if host != "" {
			class, hostCool = p.tr.TargetCoolingReason(e.rec, a.key)
		}
		switch {
		case hostCool:
			ne.HostCooling++
			if _, wide := p.tr.TargetCoolingReason(e.rec, keyHost); !wide && ne.Target != "" {
				ne.PortCooling++
			}
			if int(class) < len(hostCooling) {
				hostCooling[class]++
			}
		case e.MaxConns > 0 && e.ld.active.Load() >= connShare(int64(e.MaxConns), share):
			ne.AtMaxConns++
		case e.limit != nil && !e.limit.ready(share):
			ne.AtRate++
		case p.lines.ahead(e.ld, a.w) && e.limit != nil:
			ne.AtRate++ // what it has is for the clients ahead
		case p.lines.ahead(e.ld, a.w) && e.MaxConns > 0:
			ne.AtMaxConns++
		case e.MaxConns > 0 || e.limit != nil:
			ne.Freed++
		}
	}
	if list := s.viewOf(a).restricted(); list != nil {
		for _, i := range list {
			count(s.eps[i])
		}
	} else {
		for _, e := range s.eps {
			count(e)
		}
	}
	ne.Cooling = classCounts(cooling[:])
	ne.HostClasses = classCounts(hostCooling[:])
	return ne
}

// classCounts lists the non-zero counts of byClass, in class order.
func classCounts(byClass []int) []ClassCount {
	var out []ClassCount
	for c, n := range byClass {
		if n > 0 {
			out = append(out, ClassCount{Class: health.Class(c), N: n})
		}
	}
	return out
}
