package gateway

// The admin listener (listen.admin, issue 6): the JSON API under
// /api/upstreams, /metrics, the status page at / and /healthz. The JSON
// field names are part of the user-facing contract (CONTRACT.md, "Admin
// API"); more fields may be added, none renamed.
//
// Authentication: with listen.admin_token set, every endpoint but /healthz
// needs "Authorization: Bearer <token>". A browser cannot send that header
// when it opens the status page, so GET /?token=<token> checks the token
// once, sets an HttpOnly SameSite=Strict cookie and redirects to / (the
// token leaves the address bar and the history). The cookie is accepted for
// GET and HEAD only: it lets the page and its refresh read, while every
// state change (disable, enable, report) needs the Bearer header, so a
// cross-site form cannot act with the operator's cookie.
//
// Other web pages in a browser on this machine reach a loopback listener
// too (refuseForeign): a page may POST a text/plain body to any address
// without a CORS preflight, and a DNS-rebinding page (its own name, later
// resolved to 127.0.0.1) reads the answers as its own. So without a token
// only a Host that no DNS answer decides is served, and no state change
// is made for a page of another origin, token or not.

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream"
)

// tokenCookie carries a digest of the admin token for the status page.
const tokenCookie = "rotor_admin"

// maxReportBody bounds a /report request body.
const maxReportBody = 16 << 10

// adminHandler serves the admin listener.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.serveHealthz)
	mux.Handle("GET /metrics", s.metrics.handler())
	mux.HandleFunc("GET /{$}", s.serveStatus)
	mux.HandleFunc("GET /api/status", s.serveAPIStatus)
	mux.HandleFunc("GET /api/upstreams", s.serveList)
	mux.HandleFunc("GET /api/upstreams/{name}", s.withEndpoint(s.serveOne))
	mux.HandleFunc("POST /api/upstreams/{name}/disable", s.withEndpoint(noActionParams(s.serveDisable)))
	mux.HandleFunc("POST /api/upstreams/{name}/enable", s.withEndpoint(noActionParams(s.serveEnable)))
	mux.HandleFunc("POST /api/upstreams/{name}/report", s.withEndpoint(noActionParams(s.serveReport)))

	// Method-less patterns catch what the ones above refuse by method, so
	// that a 405 carries a JSON body as well as the Allow header.
	for path, allow := range map[string]string{
		"/healthz":                      "GET, HEAD",
		"/metrics":                      "GET, HEAD",
		"/{$}":                          "GET, HEAD",
		"/api/status":                   "GET, HEAD",
		"/api/upstreams":                "GET, HEAD",
		"/api/upstreams/{name}":         "GET, HEAD",
		"/api/upstreams/{name}/disable": "POST",
		"/api/upstreams/{name}/enable":  "POST",
		"/api/upstreams/{name}/report":  "POST",
	} {
		mux.HandleFunc(path, methodNotAllowed(allow))
	}
	mux.HandleFunc("/", notFound)
	return s.refuseForeign(s.requireToken(mux))
}

// refuseForeign answers 403 to what a web page of another site could send
// through the operator's browser:
//
//   - without listen.admin_token, a request whose Host is not "localhost",
//     a loopback address or the address the request arrived at. A
//     DNS-rebinding page sends its own name (rebind.evil.example), which
//     its owner's DNS server pointed at 127.0.0.1, and could then read the
//     API as same-origin. An IP literal is never looked up, and
//     "localhost" is answered by the browser or the hosts file, never by
//     a page owner's DNS server: no other page is served under them. With a
//     token the Host is not checked: an admin beyond loopback is reached
//     by whatever name the operator gives it, and a page cannot learn the
//     token. /healthz is left open as requireToken leaves it: it tells
//     nothing, and orchestrators ask it by any name.
//   - a state-changing request (not GET, HEAD or OPTIONS) from a browser
//     page of another origin, token or not: Sec-Fetch-Site other than
//     same-origin or none, or else an Origin whose host is not the Host
//     (http.CrossOriginProtection). A client that sends neither header,
//     as curl and scripts do, is not a browser page and passes.
func (s *Server) refuseForeign(next http.Handler) http.Handler {
	csrf := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Load().Listen.AdminToken == "" && r.URL.Path != "/healthz" {
			local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			if !adminHost(r.Host, local) {
				writeError(w, http.StatusForbidden, "host "+quoteName(r.Host)+" is not this admin listener: without admin_token "+
					"it answers to localhost and loopback addresses only (a page of another site could otherwise read it through a name it resolves here)")
				return
			}
		}
		if csrf.Check(r) != nil {
			writeError(w, http.StatusForbidden, "cross-origin request refused: a "+r.Method+" from a browser page must come from "+
				"this listener's own origin ("+foreignOrigin(r)+")")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// foreignOrigin names what made refuseForeign take r for another site's.
func foreignOrigin(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" {
		return "Sec-Fetch-Site " + quoteName(site)
	}
	return "Origin " + quoteName(r.Header.Get("Origin")) + " is not host " + quoteName(r.Host)
}

// adminHost reports whether host, a request's Host, names the admin
// listener without DNS: "localhost" (any case, trailing dot), a loopback
// address (an IPv6 one in brackets), or local, the address the request
// arrived at; each with or without a port. An empty Host (HTTP/1.0, sent
// by no browser) passes.
func adminHost(host string, local net.Addr) bool {
	if host == "" {
		return true
	}
	h, port, err := net.SplitHostPort(host)
	if err != nil { // no port: "localhost", "[::1]"
		h, port = host, ""
		if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
			h = h[1 : len(h)-1]
		}
	}
	if strings.Trim(port, "0123456789") != "" {
		return false
	}
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	if err != nil {
		return false
	}
	a = a.Unmap()
	if a.IsLoopback() {
		return true
	}
	ta, ok := local.(*net.TCPAddr)
	if !ok {
		return false
	}
	la, ok := netip.AddrFromSlice(ta.IP)
	la = la.Unmap()
	return ok && !la.IsUnspecified() && la == a.WithZone("")
}

// notFound answers 404 with a JSON error.
func notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "not found: "+r.URL.Path)
}

// methodNotAllowed answers 405 naming the allowed methods.
func methodNotAllowed(allow string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Allow", allow)
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed; use "+allow)
	}
}

// requireToken enforces listen.admin_token (read per request, so a reload
// that sets or changes it applies at once). /healthz stays open for
// orchestrators.
func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := s.cfg.Load().Listen.AdminToken
		if token == "" || r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		// wrong: a token was offered (header, cookie or ?token=) and did
		// not match, which the 401 says apart from a missing one.
		wrong := false
		bearer, ok := bearerToken(r.Header.Get("Authorization"))
		if ok && equalSecret(bearer, token) {
			next.ServeHTTP(w, r)
			return
		}
		wrong = ok
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		cookieOK := false
		if c, err := r.Cookie(tokenCookie); err == nil && c.Value != "" {
			cookieOK = equalSecret(c.Value, cookieValue(token))
			if cookieOK && read {
				next.ServeHTTP(w, r)
				return
			}
			// A cookie of a token a reload has since changed.
			wrong = wrong || !cookieOK
		}
		if read && r.URL.Path == "/" && r.URL.Query().Get("token") != "" {
			wrong = true
			if equalSecret(r.URL.Query().Get("token"), token) {
				http.SetCookie(w, &http.Cookie{
					Name: tokenCookie, Value: cookieValue(token), Path: "/",
					HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
				})
				w.Header().Set("Referrer-Policy", "no-referrer")
				// Keep the rest of the query (a bookmarked ?state=cooling
				// view); only the token leaves the address bar.
				q := r.URL.Query()
				q.Del("token")
				to := "/"
				if len(q) > 0 {
					to += "?" + q.Encode()
				}
				http.Redirect(w, r, to, http.StatusSeeOther)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="rotor admin"`)
		// Never the token sent: only which of the two cases this is, and
		// both ways in (a browser has only the second).
		const how = "(send Authorization: Bearer <token>, or open /?token=<token> in a browser for the status page)"
		switch {
		case cookieOK && !wrong:
			writeError(w, http.StatusUnauthorized, "admin token required: the status page's cookie only reads, a change needs Authorization: Bearer <token>")
		case wrong:
			writeError(w, http.StatusUnauthorized, "wrong admin token "+how)
		default:
			writeError(w, http.StatusUnauthorized, "admin token required "+how)
		}
	})
}

// bearerToken returns the token of an "Authorization: Bearer <token>"
// header. The scheme is case-insensitive (RFC 9110 §11.1): "bearer x"
// from a hand-written curl is as good as "Bearer x".
func bearerToken(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// equalSecret compares in constant time. Hashing first makes the time
// independent of the lengths as well as of the contents.
func equalSecret(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// cookieValue is what the status-page cookie holds: a digest, so the token
// itself never sits in the browser's cookie store.
func cookieValue(token string) string {
	h := sha256.Sum256([]byte("rotor admin cookie\x00" + token))
	return hex.EncodeToString(h[:])
}

// serveHealthz answers 200 while every configured listener is open, 503
// once shutdown started or when one is missing.
func (s *Server) serveHealthz(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if s.ctx.Err() != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "shutting down\n")
		return
	}
	cfg := s.cfg.Load()
	for _, f := range []struct{ name, addr string }{{"socks5", cfg.Listen.SOCKS5}, {"http", cfg.Listen.HTTP}} {
		if f.addr != "" && s.Addr(f.name) == "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, f.name+" listener is not up\n")
			return
		}
	}
	_, _ = io.WriteString(w, "ok\n")
}

// withEndpoint resolves {name} to an endpoint or answers 404.
func (s *Server) withEndpoint(h func(http.ResponseWriter, *http.Request, *upstream.Endpoint)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		e := s.pool.Lookup(name)
		if e == nil {
			writeError(w, http.StatusNotFound, "unknown upstream "+quoteName(name))
			return
		}
		h(w, r, e)
	}
}

// noActionParams refuses, with a 400 that names it, any query parameter
// of a POST action (disable, enable, report), before the action is done:
// their fields go in the JSON body. They were accepted silently
// (?detail=why kept no detail, ?dry_run=1 disabled the upstream), while
// the GET endpoints refuse a parameter they do not know (noParams).
func noActionParams(h func(http.ResponseWriter, *http.Request, *upstream.Endpoint)) func(http.ResponseWriter, *http.Request, *upstream.Endpoint) {
	return func(w http.ResponseWriter, r *http.Request, e *upstream.Endpoint) {
		v, err := queryValues(r)
		if err == nil && len(v) > 0 {
			keys := make([]string, 0, len(v))
			for k := range v {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			err = fmt.Errorf("unknown parameter %s (this action takes none: its fields go in the JSON body)", quoteName(keys[0]))
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		h(w, r, e)
	}
}

// serveList answers GET /api/upstreams: every record, or those the query
// selects (admin_list.go); X-Total-Count says how many matched before
// offset and limit.
func (s *Server) serveList(w http.ResponseWriter, r *http.Request) {
	q, err := listQueryOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	l := s.listRecords(q)
	w.Header().Set("X-Total-Count", strconv.Itoa(l.matched))
	writeJSON(w, http.StatusOK, l.page)
}

// serveOne answers GET /api/upstreams/{name}: the one record. It takes no
// parameters (noParams): one given is a 400, as on the list.
func (s *Server) serveOne(w http.ResponseWriter, r *http.Request, e *upstream.Endpoint) {
	if err := noParams(r); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, s.record(e))
}

// serveDisable moves the upstream to disabled (reason operator). It stays
// listed and keeps its counters and history. An optional JSON body
// {"detail": "why"} is kept in the history, so the next operator knows why.
func (s *Server) serveDisable(w http.ResponseWriter, r *http.Request, e *upstream.Endpoint) {
	var body struct {
		Detail string `json:"detail"`
	}
	if err := decodeBody(w, r, &body); err != nil && !errors.Is(err, io.EOF) {
		writeBodyError(w, err, "no body or JSON {\"detail\": \"why\"}")
		return
	}
	detail := "disabled via admin API"
	// The reason is the operator's text: it may quote a password, and it
	// goes into the history, the API, the state file and the log. It is
	// scrubbed against every secret before it is cut (no start of one
	// is left at the cut).
	if d := cleanText(s.scrubPeer(body.Detail), 200); d != "" {
		detail += ": " + d
	}
	s.tr.Disable(e.Record(), detail)
	s.log.Info().Str("upstream", e.Name).Str("client", r.RemoteAddr).Str("detail", detail).Msg("admin: upstream disabled")
	writeJSON(w, http.StatusOK, s.record(e))
}

// decodeBody decodes r's body, at most maxReportBody bytes, as one JSON
// object into v: a field v does not have, or anything but white space
// after the object ('{"class":"refused"} {"x":1}', '{...}xxxx'), is an
// error, so a body that is not what the client meant is never half
// applied. An empty body is io.EOF.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxReportBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// A second Decode reads the next value: io.EOF when nothing but
	// white space follows; a syntax error for garbage.
	switch err := dec.Decode(new(json.RawMessage)); {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return fmt.Errorf("after the JSON object: %w", err)
	default:
		return errors.New("more than one JSON value: send one object")
	}
}

// writeBodyError answers a body decodeBody refused: 413 for one over
// maxReportBody (the client must send less, not something else; the
// reader's own text, "http: request body too large", was given as a 400),
// 408 for one that stopped coming before the server's read deadline
// (listen.handshake_timeout: RFC 9110 §15.5.9; it was a 400 quoting
// net's "read tcp 127.0.0.1:…->…: i/o timeout"), else 400. want says what
// the endpoint takes. A read error of the connection is given without
// the *net.OpError around it, whose text names both socket addresses.
func writeBodyError(w http.ResponseWriter, err error, want string) {
	var mb *http.MaxBytesError
	var ne net.Error
	var oe *net.OpError
	switch {
	case errors.As(err, &mb):
		writeError(w, http.StatusRequestEntityTooLarge, "body over "+strconv.FormatInt(mb.Limit, 10)+" bytes: want "+want)
	case errors.As(err, &ne) && ne.Timeout():
		// The connection cannot carry another request: its read
		// deadline has passed.
		w.Header().Set("Connection", "close")
		writeError(w, http.StatusRequestTimeout, "the body did not arrive within listen.handshake_timeout: send the whole request at once; want "+want)
	case errors.As(err, &oe) && oe.Err != nil:
		writeError(w, http.StatusBadRequest, "invalid body: want "+want+": reading it failed: "+oe.Err.Error())
	default:
		writeError(w, http.StatusBadRequest, "invalid body: want "+want+": "+err.Error())
	}
}

// serveEnable moves a disabled or cooling upstream to probe_allowed: it
// serves again only after a passing probe. On a probe_allowed upstream
// with no probe running it makes sure one is queued.
func (s *Server) serveEnable(w http.ResponseWriter, r *http.Request, e *upstream.Endpoint) {
	// It takes no fields: a body that is not empty or {} is refused, as
	// the other actions refuse what they do not understand.
	if err := decodeBody(w, r, &struct{}{}); err != nil && !errors.Is(err, io.EOF) {
		writeBodyError(w, err, "no body or {}")
		return
	}
	if err := s.tr.Enable(e.Record()); err != nil {
		msg := "upstream " + e.Name + " is " + err.Error() + ": set disabled = false in its entry and reload"
		if errors.Is(err, health.ErrOperatorHeld) {
			// An operator disabled it before the config did: that disable
			// outlasts the config's (issue: the 409's fix did not work).
			msg += ", then enable it here"
		}
		writeError(w, http.StatusConflict, msg)
		return
	}
	s.log.Info().Str("upstream", e.Name).Str("client", r.RemoteAddr).Msg("admin: upstream enabled")
	writeJSON(w, http.StatusOK, s.record(e))
}

// cleanText drops control characters and bounds s to n bytes, so a
// client-supplied detail cannot forge log lines or bloat the history.
func cleanText(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8Start(s[len(s)-1]) {
			s = s[:len(s)-1]
		}
	}
	return s
}

func utf8Start(b byte) bool { return b < 0x80 || b >= 0xC0 }

// quoteName quotes a user-supplied name for an error message.
func quoteName(s string) string {
	b, _ := json.Marshal(cleanText(s, 200))
	return string(b)
}
