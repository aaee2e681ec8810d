package gateway

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// reportBody is the body of POST /api/upstreams/{name}/report.
type reportBody struct {
	Class  string `json:"class"`
	Detail string `json:"detail"`
	// Target is kept raw to tell a field left out (the whole upstream)
	// from one given blank or null, which reportTarget refuses.
	Target json.RawMessage `json:"target"`
	// Stage is optional (not in the contract's body): the default comes
	// from the class, see reportStage.
	Stage string `json:"stage"`
}

// serveReport records a failure a client observed behind rotor's back (a
// ban page, a CAPTCHA): it counts like a failure rotor saw itself, so the
// class's cooldown policy and scope apply.
func (s *Server) serveReport(w http.ResponseWriter, r *http.Request, e *upstream.Endpoint) {
	var body reportBody
	if err := decodeBody(w, r, &body); err != nil {
		writeBodyError(w, err, "JSON {\"class\", \"detail\", \"target\", \"stage\"}")
		return
	}
	class, ok := health.ParseClass(body.Class)
	if !ok || class == health.ClassNone || class == health.Operator {
		writeError(w, http.StatusBadRequest, "invalid class "+quoteName(body.Class)+": want one of "+strings.Join(reportableClasses(), ", "))
		return
	}
	stage := reportStage(class)
	if body.Stage != "" {
		if err := stage.UnmarshalText([]byte(body.Stage)); err != nil || !reportableStage(stage) {
			writeError(w, http.StatusBadRequest, "invalid stage "+quoteName(body.Stage)+": want one of "+strings.Join(reportableStages(), ", "))
			return
		}
	}
	host, msg := reportTarget(body.Target)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	detail := "reported by client"
	if host != "" && !reportScopedToTarget(s.cfg.Load(), class) {
		// The cooling is the whole upstream's, and its history entry names
		// no target: the detail keeps the site that set it off.
		detail += " for " + host
	}
	// The detail is the client's text, kept in the history, the API and
	// the state file and logged with the state change: it is scrubbed
	// against every secret rotor holds (any upstream's password, not only
	// this one's, the clients', the admin token) before it is cut, as
	// serveDisable does.
	if d := cleanText(s.scrubPeer(body.Detail), 200); d != "" {
		detail += ": " + d
	}
	f := &health.Failure{Class: class, Stage: stage, Target: host, Err: errors.New(detail)}
	s.pool.Report(e, f)
	// The client's detail goes in the line as the disable's does (it
	// was left out: a report the upstream's state already covered left
	// no trace of what was reported); the target only when one was given.
	ev := s.log.Info().Str("upstream", e.Name).Str("client", r.RemoteAddr).Str("class", class.String()).
		Str("stage", stage.String()).Str("detail", detail)
	if f.Target != "" {
		ev = ev.Str("target", f.Target)
	}
	ev.Msg("admin: failure reported")
	writeJSON(w, http.StatusOK, s.record(e))
}

// reportScopedToTarget reports whether a failure of class c that names a
// target cools the upstream for that host only under cfg's scopes, as
// trackerConfig hands them to health ([target_http_error] and [slow_body]
// scope; every other class is the upstream's).
func reportScopedToTarget(cfg *Config, c health.Class) bool {
	switch c {
	case health.TargetHTTPError:
		return cfg.TargetHTTPError.Scope == "target"
	case health.SlowBody:
		return cfg.SlowBody.Scope == "target"
	}
	return false
}

// reportableClasses lists the classes /report accepts.
func reportableClasses() []string {
	return []string{
		health.Refused.String(), health.Timeout.String(), health.AuthRejected.String(),
		health.UpstreamError.String(), health.SlowBody.String(), health.TargetHTTPError.String(),
		health.TargetUnreachable.String(), health.TargetTimeout.String(),
	}
}

// reportableStage reports whether a client may name st in a report. probe
// and operator are rotor's own (its prober, the disable and enable
// actions): a client's report at those stages would show in the history
// as a failed probe or an operator's act.
func reportableStage(st health.Stage) bool {
	return st != health.StageNone && st != health.StageProbe && st != health.StageOperator
}

// reportableStages lists the stages /report accepts.
func reportableStages() []string {
	var names []string
	for st := health.StageNone; st <= health.StageOperator; st++ {
		if reportableStage(st) {
			names = append(names, st.String())
		}
	}
	return names
}

// reportStage is the stage of a client-reported failure of class c when
// the body names none: where that class is usually observed.
func reportStage(c health.Class) health.Stage {
	switch c {
	case health.TargetHTTPError:
		return health.StageHTTPStatus
	case health.SlowBody:
		return health.StageBody
	case health.AuthRejected:
		return health.StageProxyAuth
	case health.Refused, health.Timeout:
		return health.StageDial
	case health.UpstreamError:
		return health.StageProxyHandshake
	default: // target_unreachable, target_timeout
		return health.StageTargetConnect
	}
}

// reportTarget reads a report's target field: "" when it was left out
// (the report is for the whole upstream), else its host (targetHost). A
// target given blank ("", "  ") or null is refused (msg says why), not
// taken as none: a script whose host variable came out empty would
// otherwise cool the upstream for every site, whatever the class's scope.
func reportTarget(raw json.RawMessage) (host, msg string) {
	if raw == nil {
		return "", ""
	}
	var t string
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", "invalid target " + cleanText(string(raw), 200) + ": want a JSON string"
	}
	if string(raw) == "null" || strings.TrimSpace(t) == "" {
		return "", "invalid target " + cleanText(string(raw), 200) + ": it is empty; name the host the failure was seen for, " +
			"or leave \"target\" out to report it for the whole upstream"
	}
	host, why := targetHost(t)
	if why != "" {
		return "", "invalid target " + quoteName(t) + ": " + why
	}
	return host, ""
}

// targetHost reduces a reported target (a host, host:port, [v6]:port or
// a URL pasted from a scraper's log) to a lower-case host without port or
// trailing dot, the key of per-target cooldowns. For anything else (blank
// too) why says what is wrong: a cooldown for a host no request can name
// would do nothing, silently. A port, when there is one, is checked as the
// fronts check a client's (1 to 65535: "host:0" names no target).
func targetHost(t string) (host, why string) {
	const want = "want a host name or IP address, host:port, or a URL"
	t = strings.TrimSpace(t)
	port := ""
	if strings.Contains(t, "://") {
		u, err := url.Parse(t)
		if err != nil || u.Host == "" {
			return "", want
		}
		t, port = u.Hostname(), u.Port()
	} else if h, p, err := net.SplitHostPort(t); err == nil {
		t, port = h, p
		if port == "" {
			return "", "the port is empty; " + want
		}
	} else if strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]") {
		t = t[1 : len(t)-1]
	}
	t = strings.ToLower(t)
	// validTargetHost takes a trailing dot, as the fronts do, and misses
	// the empty label before a second one.
	if !validTargetHost(t) || strings.HasSuffix(t, "..") {
		return "", want
	}
	if port != "" {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return "", "the port must be a number from 1 to 65535"
		}
	}
	// "h.example." is the same name as "h.example" (the empty root label,
	// RFC 1034 §3.1): one host's cooldowns must not split in two.
	return strings.TrimSuffix(t, "."), ""
}
