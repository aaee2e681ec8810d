package gateway

// The status page (GET / on the admin listener): one row per upstream with
// its state as a colour, reason and stage, time left in cooling and recent
// history on expand, totals at the top. It is rendered on the server with
// html/template, so it reads without JavaScript; a small inline script
// then refreshes it from GET /api/status every 2 seconds, rebuilding the
// rows with DOM calls (never innerHTML: names and details may carry text
// an upstream or a target sent) and keeping expanded rows open. No
// external asset is loaded: a Content-Security-Policy with a per-response
// nonce allows only the page's own inline style and script and fetches to
// its own origin.

import (
	"bytes"
	"crypto/rand"
	_ "embed"
	"encoding/base64"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"left":  timeLeft,
	"short": shortTime,
	"deref": func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	},
	"sum": func(m map[string]uint64) uint64 {
		var n uint64
		for _, v := range m {
			n += v
		}
		return n
	},
	"failureList": failureList,
	"ptr":         func(s string) *string { return &s },
	"reverse": func(h []transitionJSON) []transitionJSON {
		out := make([]transitionJSON, len(h))
		for i, t := range h {
			out[len(h)-1-i] = t
		}
		return out
	},
}).Parse(statusHTML))

// statusPageRows is how many records the status page shows at once (the
// first ones in pool order that its state card and search select); the
// totals cover every record.
const statusPageRows = 500

// statusPage is the template's data.
type statusPage struct {
	statusJSON
	now    time.Time
	Nonce  string
	States []stateCard
	Limit  int
	State  string // the state card selected, "" for all
	Search string // the search box's text
}

// stateCard is one totals card.
type stateCard struct {
	State string
	Label string
	N     int
}

// Left formats the time until t (RFC 3339) from the render time.
func (p statusPage) Left(t *string) string { return timeLeft(p.now, t) }

// More says how many selected records the page leaves out, "" when none.
func (p statusPage) More() string {
	if p.Matched <= len(p.Upstreams) {
		return ""
	}
	return moreText(len(p.Upstreams), p.Matched)
}

// moreText is the server-side twin of the page script's note.
func moreText(shown, matched int) string {
	return "Showing the first " + strconv.Itoa(shown) + " of " + strconv.Itoa(matched) +
		" upstreams: pick a state above or search to narrow the list."
}

// serveStatus renders the status page. /?state=cooling&q=dc selects what
// it lists (the page keeps its address in step with the cards and the
// search box, so a view can be bookmarked); a parameter it cannot use is
// ignored rather than refused, since a person typed it.
func (s *Server) serveStatus(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	var q listQuery
	if want := v.Get("state"); want != "" {
		var st health.State
		if st.UnmarshalText([]byte(want)) == nil {
			q.states = []health.State{st}
		}
	}
	search := strings.TrimSpace(v.Get("q"))
	q.text = strings.ToLower(search)
	q.limit = statusPageRows
	st := s.status(q)
	nonce := newNonce()
	p := statusPage{statusJSON: st, now: s.clock.Now(), Nonce: nonce, Limit: statusPageRows, Search: search}
	if len(q.states) == 1 {
		p.State = q.states[0].String()
	}
	for _, x := range []struct{ state, label string }{
		{"eligible", "Eligible"}, {"cooling", "Cooling"}, {"probe_allowed", "Probe allowed"}, {"disabled", "Disabled"},
	} {
		p.States = append(p.States, stateCard{State: x.state, Label: x.label, N: st.States[x.state]})
	}
	var buf bytes.Buffer
	if err := statusTemplate.Execute(&buf, p); err != nil {
		s.log.Error().Err(err).Str("listener", "admin").Msg("status page")
		writeError(w, http.StatusInternalServerError, "status page: "+err.Error())
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'nonce-"+nonce+"'; script-src 'nonce-"+nonce+
		"'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}

func newNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b) // no "+", "/", "=": nothing for html/template to escape
}

// timeLeft formats the time from now until t (RFC 3339): "2m 05s", or ""
// when t is null or past.
func timeLeft(now time.Time, t *string) string {
	if t == nil {
		return ""
	}
	until, err := time.Parse(time.RFC3339, *t)
	if err != nil {
		return ""
	}
	return formatLeft(until.Sub(now))
}

// formatLeft is the server-side twin of the page script's fmtLeft.
func formatLeft(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	sec := int64((d + time.Second - 1) / time.Second)
	switch {
	case sec >= 3600:
		return strconv.FormatInt(sec/3600, 10) + "h " + pad2(sec%3600/60) + "m"
	case sec >= 60:
		return strconv.FormatInt(sec/60, 10) + "m " + pad2(sec%60) + "s"
	}
	return strconv.FormatInt(sec, 10) + "s"
}

func pad2(n int64) string {
	if n < 10 {
		return "0" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}

// shortTime shows an RFC 3339 time as "15:04:05" (UTC) for tables.
func shortTime(t *string) string {
	if t == nil {
		return "—"
	}
	tt, err := time.Parse(time.RFC3339, *t)
	if err != nil {
		return *t
	}
	return tt.UTC().Format("2006-01-02 15:04:05")
}

// failureList formats per-class failure counts for a tooltip.
func failureList(m map[string]uint64) string {
	var b bytes.Buffer
	for _, c := range slices.Sorted(maps.Keys(m)) {
		if n := m[c]; n > 0 {
			if b.Len() > 0 {
				b.WriteString(", ")
			}
			b.WriteString(c + " " + strconv.FormatUint(n, 10))
		}
	}
	if b.Len() == 0 {
		return "no failures"
	}
	return b.String()
}

// statusJSON is GET /api/status: totals and records in one answer, for the
// status page's refresh. States counts every record; Upstreams holds the
// page the query selected (all of them without parameters), Matched how
// many it selected before paging, Total how many the pool has.
type statusJSON struct {
	Now     string         `json:"now"`
	States  map[string]int `json:"states"`
	Waiting int64          `json:"waiting"`
	Tunnels int            `json:"tunnels"`
	// RequestsInFlight counts the plain-HTTP forwarded requests in
	// progress: no tunnel, yet each holds an upstream (its active), so
	// tunnels + requests_in_flight is what the rows' active add up to
	// (SOCKS5 and CONNECT tunnels still dialing aside).
	RequestsInFlight int64          `json:"requests_in_flight"`
	Total            int            `json:"total"`
	Matched          int            `json:"matched"`
	Upstreams        []upstreamJSON `json:"upstreams"`
}

func (s *Server) status(q listQuery) statusJSON {
	l := s.listRecords(q)
	return statusJSON{
		Now:              s.clock.Now().UTC().Format(time.RFC3339Nano),
		States:           l.states,
		Waiting:          s.pool.Waiting(),
		Tunnels:          s.tunnels.count(),
		RequestsInFlight: s.metrics.requestsInFlight(),
		Total:            l.total,
		Matched:          l.matched,
		Upstreams:        l.page,
	}
}

func (s *Server) serveAPIStatus(w http.ResponseWriter, r *http.Request) {
	q, err := listQueryOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.status(q))
}
