package gateway

import (
	"encoding/json"
	"net/http"
	"net/url"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// upstreamJSON is one record of the admin API (CONTRACT.md). Nullable
// contract fields are pointers: reason and stage are null before the first
// failure, until is null unless cooling, last_success null before the first
// success.
type upstreamJSON struct {
	Name        string            `json:"name"`
	URL         string            `json:"url"`
	State       string            `json:"state"`
	Reason      *string           `json:"reason"`
	Stage       *string           `json:"stage"`
	Until       *string           `json:"until"`
	Failures    map[string]uint64 `json:"failures"`
	Successes   uint64            `json:"successes"`
	Active      int64             `json:"active"`
	LastSuccess *string           `json:"last_success"`
	History     []transitionJSON  `json:"history"`
	Targets     []targetJSON      `json:"targets"`

	// Beyond the contract.
	Detail          string            `json:"detail,omitempty"`
	Tags            []string          `json:"tags"`
	FailuresByStage map[string]uint64 `json:"failures_by_stage"`
	Streak          int               `json:"streak"`
	Probing         bool              `json:"probing"`
	SlowStart       bool              `json:"slow_start"`
	Probes          probesJSON        `json:"probes"`
	// LatencyMS is the smoothed tunnel set-up time lowest-latency picks
	// by, in milliseconds; left out until measured.
	LatencyMS *float64 `json:"latency_ms,omitempty"`
}

type transitionJSON struct {
	At     string  `json:"at"`
	From   string  `json:"from"`
	To     string  `json:"to"`
	Reason *string `json:"reason"`
	Stage  *string `json:"stage"`
	Detail string  `json:"detail"`
	Target string  `json:"target,omitempty"`
}

type targetJSON struct {
	Host   string  `json:"host"`
	Reason *string `json:"reason"`
	Stage  *string `json:"stage"`
	Until  *string `json:"until"`
}

type probesJSON struct {
	OK     uint64  `json:"ok"`
	Failed uint64  `json:"failed"`
	Last   *string `json:"last"`
}

// record renders e's health snapshot for the API.
func (s *Server) record(e *upstream.Endpoint) upstreamJSON {
	snap := s.tr.Snapshot(e.Record())
	scrub := passwordScrubber(e)
	j := upstreamJSON{
		Name:            e.Name,
		URL:             e.Redacted(),
		State:           snap.State.String(),
		Reason:          classPtr(snap.Reason),
		Stage:           stagePtr(snap.Stage),
		Until:           timePtr(snap.Until),
		Failures:        map[string]uint64{},
		Successes:       snap.Successes,
		Active:          e.Active(),
		LastSuccess:     timePtr(snap.LastSuccess),
		History:         make([]transitionJSON, 0, len(snap.History)),
		Targets:         make([]targetJSON, 0, len(snap.Targets)),
		Detail:          scrub(snap.Detail),
		Tags:            append([]string{}, e.Tags...),
		FailuresByStage: map[string]uint64{},
		Streak:          snap.Streak,
		Probing:         snap.Probing,
		SlowStart:       snap.SlowStart,
		Probes:          probesJSON{OK: snap.ProbesOK, Failed: snap.ProbesFailed, Last: timePtr(snap.LastProbe)},
	}
	if d := e.Latency(); d > 0 {
		ms := float64(d.Microseconds()) / 1000
		j.LatencyMS = &ms
	}
	for c, n := range snap.Failures {
		j.Failures[c.String()] = n
	}
	for st, n := range snap.Stages {
		j.FailuresByStage[st.String()] = n
	}
	for _, h := range snap.History {
		j.History = append(j.History, transitionJSON{
			At: formatTime(h.At), From: h.From.String(), To: h.To.String(),
			Reason: classPtr(h.Reason), Stage: stagePtr(h.Stage), Detail: scrub(h.Detail), Target: h.Target,
		})
	}
	for _, t := range snap.Targets {
		j.Targets = append(j.Targets, targetJSON{Host: t.Host, Reason: classPtr(t.Reason), Stage: stagePtr(t.Stage), Until: timePtr(t.Until)})
	}
	return j
}

// passwordScrubber returns the filter for e's details (detailScrubber):
// its password in every form rotor sends it, header values and tokens.
// Details come from errors that should never carry them (upstream redacts
// its errors); this is the last line of defence for the API and the state
// file.
func passwordScrubber(e *upstream.Endpoint) func(string) string {
	var ui *url.Userinfo
	if e.URL != nil {
		ui = e.URL.User
	}
	return detailScrubber(ui)
}

// endpointPassword is e's upstream password, or "".
func endpointPassword(e *upstream.Endpoint) string {
	pw := ""
	if e.URL != nil && e.URL.User != nil {
		pw, _ = e.URL.User.Password()
	}
	return pw
}

func classPtr(c health.Class) *string {
	if c == health.ClassNone {
		return nil
	}
	s := c.String()
	return &s
}

func stagePtr(st health.Stage) *string {
	if st == health.StageNone {
		return nil
	}
	s := st.String()
	return &s
}

func timePtr(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := formatTime(t)
	return &s
}

// formatTime is RFC 3339 in UTC, the contract's time format.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		writeError(w, http.StatusInternalServerError, "encode: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// writeError answers {"error": msg}.
func writeError(w http.ResponseWriter, code int, msg string) {
	b, _ := json.Marshal(struct {
		Error string `json:"error"`
	}{msg})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
