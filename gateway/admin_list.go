package gateway

// Filtering and paging of the record lists, GET /api/upstreams and
// GET /api/status. Without parameters the whole pool is returned, as the
// contract says. A record renders to ~500 bytes of JSON, so a pool of
// tens of thousands of upstreams (seller lists) would make every refresh
// of the status page megabytes of JSON and a DOM the browser cannot keep
// up with; the page therefore asks for one page of the records the
// operator is looking at (a state, a search), while its totals stay whole.

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// listQuery selects records: all of its conditions hold for each one.
type listQuery struct {
	states  []health.State // any of these; none: every state
	reasons []health.Class // last failure of any of these classes
	tags    []string       // carries every one of these
	text    string         // lower-case substring of the name or the redacted URL
	offset  int            // matches skipped before the page
	limit   int            // page size; 0: no limit
}

// listParams names the parameters parseListQuery knows, for its errors.
const listParams = "state, reason, tag, q, offset, limit"

// listQueryOf reads the list parameters of r's query string. One that
// does not decode is refused: r.URL.Query() drops without a word what
// url.ParseQuery cannot read (a bad escape as in "q=%zz", a ";" between
// parameters), and what remains, often nothing, selected the whole pool.
func listQueryOf(r *http.Request) (listQuery, error) {
	v, err := queryValues(r)
	if err != nil {
		return listQuery{}, err
	}
	return parseListQuery(v)
}

// queryValues decodes r's query string, with an error that says what is
// wrong with one that does not decode.
func queryValues(r *http.Request) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		var esc url.EscapeError
		switch {
		case errors.As(err, &esc):
			return nil, fmt.Errorf("query: invalid escape %s: a %% starts two hex digits (%%25 for %% itself)", quoteName(string(esc)))
		case strings.Contains(r.URL.RawQuery, ";"):
			return nil, errors.New("query: parameters are separated by &, not ;")
		}
		return nil, fmt.Errorf("query: %w", err)
	}
	return v, nil
}

// noParams refuses any parameter in r's query string: GET
// /api/upstreams/{name} takes none, and a parameter there (a filter meant
// for the list) must not be ignored without a word, as the list refuses
// one it does not know.
func noParams(r *http.Request) error {
	v, err := queryValues(r)
	if err != nil {
		return err
	}
	if len(v) == 0 {
		return nil
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return fmt.Errorf("unknown parameter %s (a single record takes none; the list /api/upstreams takes %s)", quoteName(keys[0]), listParams)
}

// parseListQuery reads a list request's parameters. A parameter may be
// repeated or hold a comma-separated list (state, reason, tag). Unknown
// parameters and values are errors, so that a typo does not silently
// return the whole pool.
func parseListQuery(v url.Values) (listQuery, error) {
	var q listQuery
	for key, vals := range v {
		switch key {
		case "state":
			for _, s := range splitParam(vals) {
				var st health.State
				if err := st.UnmarshalText([]byte(s)); err != nil {
					return q, fmt.Errorf("state: unknown state %s (eligible, cooling, probe_allowed, disabled)", quoteName(s))
				}
				q.states = append(q.states, st)
			}
		case "reason":
			for _, s := range splitParam(vals) {
				c, ok := health.ParseClass(s)
				if !ok || c == health.ClassNone {
					return q, fmt.Errorf("reason: unknown class %s (%s)", quoteName(s), strings.Join(reasonNames(), ", "))
				}
				q.reasons = append(q.reasons, c)
			}
		case "tag":
			q.tags = append(q.tags, splitParam(vals)...)
		case "q":
			q.text = strings.ToLower(strings.TrimSpace(vals[len(vals)-1]))
		case "offset", "limit":
			n, err := strconv.Atoi(vals[len(vals)-1])
			if err != nil || n < 0 {
				return q, fmt.Errorf("%s: want a whole number >= 0, got %s", key, quoteName(vals[len(vals)-1]))
			}
			if key == "offset" {
				q.offset = n
			} else {
				q.limit = n
			}
		default:
			return q, fmt.Errorf("unknown parameter %s (known: %s)", quoteName(key), listParams)
		}
	}
	return q, nil
}

// splitParam flattens repeated and comma-separated values, dropping empty
// ones ("state=cooling,probe_allowed&state=disabled").
func splitParam(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, s := range strings.Split(v, ",") {
			if s = strings.TrimSpace(s); s != "" {
				out = append(out, s)
			}
		}
	}
	return out
}

// reasonNames lists the classes a record's last failure can have.
func reasonNames() []string {
	var out []string
	for _, c := range health.AllClasses() {
		out = append(out, c.String())
	}
	return out
}

// matches reports whether an endpoint in state st, last failed with
// reason, is selected by q.
func (q *listQuery) matches(e *upstream.Endpoint, st health.State, reason health.Class) bool {
	if len(q.states) > 0 && !containsValue(q.states, st) {
		return false
	}
	if len(q.reasons) > 0 && !containsValue(q.reasons, reason) {
		return false
	}
	if len(q.tags) > 0 && !e.HasTags(q.tags) {
		return false
	}
	if q.text != "" && !strings.Contains(strings.ToLower(e.Name), q.text) &&
		!strings.Contains(strings.ToLower(e.Redacted()), q.text) {
		return false
	}
	return true
}

func containsValue[T comparable](xs []T, x T) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// recordList is one page of records and what it was taken from.
type recordList struct {
	page    []upstreamJSON
	matched int            // records q selects, before paging
	total   int            // records in the pool
	states  map[string]int // every record by state, whatever q selects
}

// listRecords walks the pool once, in pool order: it counts every record
// by state and renders only the page of those q selects.
func (s *Server) listRecords(q listQuery) recordList {
	eps := s.pool.Endpoints()
	l := recordList{total: len(eps), states: make(map[string]int, 4)}
	for _, st := range health.AllStates() {
		l.states[st.String()] = 0
	}
	for _, e := range eps {
		st, reason := s.tr.Status(e.Record())
		l.states[st.String()]++
		if !q.matches(e, st, reason) {
			continue
		}
		l.matched++
		if l.matched > q.offset && (q.limit == 0 || len(l.page) < q.limit) {
			l.page = append(l.page, s.record(e))
		}
	}
	if l.page == nil {
		l.page = []upstreamJSON{}
	}
	return l
}
