package upstream

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// maxListLine bounds one line of a list file; longer lines are reported
// and skipped rather than buffered without limit.
const maxListLine = 4096

// ListEntry is one upstream parsed from a list file.
type ListEntry struct {
	Line int      // 1-based line number in the file
	URL  *url.URL // scheme://[user:pass@]host:port, never with a path
}

// LineError is a list-file line that was skipped. Err never contains the
// line's password.
type LineError struct {
	Line int // 1-based; 0 for errors not tied to a line (bad default scheme)
	Err  error
}

func (e LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }
func (e LineError) Unwrap() error { return e.Err }

// listSchemes are the schemes a list file may name; direct makes no sense
// in a list of proxies.
var listSchemes = map[string]bool{"socks5": true, "socks5h": true, "http": true, "https": true}

// ParseList reads a proxy list in the formats proxy sellers hand out
// (issue 6), one proxy per line:
//
//	scheme://user:pass@host:port
//	scheme://host:port
//	host:port
//	host:port:user:pass     (the password may contain ':')
//	user:pass:host:port     (likewise; a line that reads as host:port:user:pass is read so)
//	user:pass@host:port     (split at the last '@')
//
// IPv6 hosts are bracketed ("[::1]:1080"). Lines starting with '#' and blank
// lines are ignored, and so is a trailing comment: a '#' that follows
// white space, and the rest of the line ("1.2.3.4:8080  # dc-1"). A '#'
// right after other text is kept, since passwords hold it
// ("h:1:u:Pa#ss"); a password holding white space then '#' must be
// written percent-encoded in URL form ("http://u:Pa%20%23ss@h:1").
// Leading/trailing space, CR line endings and a UTF-8 BOM are tolerated.
// Lines without a scheme get defaultScheme. Bad lines are returned as
// LineErrors and skipped; the good ones are all returned.
func ParseList(r io.Reader, defaultScheme string) ([]ListEntry, []LineError) {
	var (
		entries []ListEntry
		errs    []LineError
	)
	if !listSchemes[defaultScheme] {
		return nil, []LineError{{Line: 0, Err: fmt.Errorf("invalid default scheme %q (want socks5, http or https)", defaultScheme)}}
	}
	br := bufio.NewReaderSize(r, maxListLine)
	for n := 1; ; n++ {
		line, tooLong, err := readLine(br)
		if err != nil && !errors.Is(err, io.EOF) {
			errs = append(errs, LineError{Line: n, Err: fmt.Errorf("read: %w", err)})
			break
		}
		if n == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		switch s := stripComment(strings.TrimSpace(string(line))); {
		case tooLong:
			errs = append(errs, LineError{Line: n, Err: fmt.Errorf("line longer than %d bytes", maxListLine)})
		case s == "" || s[0] == '#':
		default:
			u, perr := parseListLine(s, defaultScheme)
			if perr != nil {
				errs = append(errs, LineError{Line: n, Err: perr})
			} else {
				entries = append(entries, ListEntry{Line: n, URL: u})
			}
		}
		if err != nil { // io.EOF after the last line
			break
		}
	}
	return entries, errs
}

// stripComment drops a trailing comment from a trimmed line: the first
// '#' that follows a space or tab, and what comes after it. A line that
// starts with '#' is left whole (the caller skips it).
func stripComment(s string) string {
	for i := 1; i < len(s); i++ {
		if s[i] == '#' && (s[i-1] == ' ' || s[i-1] == '\t') {
			return strings.TrimSpace(s[:i])
		}
	}
	return s
}

// readLine returns the next line without its terminator. An over-long line
// is consumed to its end and reported with tooLong.
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			tooLong = true
			continue
		}
		if !tooLong {
			line = bytes.TrimRight(chunk, "\r\n")
		}
		if err == io.EOF && len(chunk) == 0 && !tooLong {
			return nil, false, io.EOF
		}
		if err == io.EOF {
			// A last line without newline: report it now, EOF next call.
			return line, tooLong, nil
		}
		return line, tooLong, err
	}
}

// SchemeTypo explains raw, an upstream URL or a list line, that starts
// with a known scheme but lacks the "//" after its ':' ("direct:",
// "socks5:/x") or the ':' before its "//" ("http//h:1"): msg names what
// is missing with the shape that scheme takes (`want direct:// (the "//"
// after "direct:" is missing)`). asWritten is false when what follows the
// scheme may hold a password (an '@', or a last ':' not followed by a
// port): raw must then not be shown as written. ok is false for anything
// else. The config's [[upstream]] url and a list file's line share it,
// so both say the same.
func SchemeTypo(raw string) (msg string, asWritten, ok bool) {
	msg, asWritten, _, ok = schemeTypo(raw)
	return msg, asWritten, ok
}

// schemeTypo is SchemeTypo, with slash set when a '/' follows the scheme
// or its ':' ("http//", "socks5:/"), which no seller line starts with.
func schemeTypo(raw string) (msg string, asWritten, slash, ok bool) {
	for _, sch := range []string{"socks5h", "socks5", "https", "http", "direct"} {
		if len(raw) <= len(sch) || !strings.EqualFold(raw[:len(sch)], sch) {
			continue
		}
		var prefix, missing string
		switch {
		case strings.HasPrefix(raw[len(sch):], "://"):
			return "", false, false, false // nothing is missing
		case raw[len(sch)] == ':':
			prefix, missing = raw[:len(sch)+1], `the "//" after `+strconv.Quote(raw[:len(sch)+1])+" is missing"
			slash = strings.HasPrefix(raw[len(prefix):], "/")
		case strings.HasPrefix(raw[len(sch):], "//"):
			prefix, missing = raw[:len(sch)+2], "the ':' after "+strconv.Quote(raw[:len(sch)])+" is missing"
			slash = true
		default:
			continue
		}
		rest := raw[len(prefix):]
		i := strings.LastIndex(rest, ":")
		asWritten = !strings.Contains(rest, "@") && (i < 0 || strings.Trim(rest[i+1:], "0123456789") == "")
		want := sch + "://[user:pass@]host:port"
		if sch == "direct" {
			want = "direct://"
		}
		return "want " + want + " (" + missing + ")", asWritten, slash, true
	}
	return "", false, false, false
}

// listTypo is the error of a list line s that SchemeTypo explains, nil for
// any other: a line whose scheme lacks a '/' or a ':' ("http//h:1" was
// refused as invalid host "http//h", "direct:" as an invalid port) says
// what the config's url says, shown as written unless it may hold a
// password. A line that starts "http:" may still be user:pass:host:port
// with a user "http": it is taken for a typo only when it does not parse
// (err); one with a '/' after the scheme ("https//u:pw@h:1", read as the
// user "https//u") never does.
func listTypo(s string, err error) error {
	msg, asWritten, slash, ok := schemeTypo(s)
	if !ok || err == nil && !slash {
		return nil
	}
	if len(s) >= len("direct") && strings.EqualFold(s[:len("direct")], "direct") {
		msg += "; a list file takes socks5, http or https proxies"
	}
	if asWritten {
		return fmt.Errorf("upstream %q: %s", s, msg)
	}
	return errors.New(msg)
}

func parseListLine(s, defaultScheme string) (*url.URL, error) {
	u, err := parseListEntry(s, defaultScheme)
	if terr := listTypo(s, err); terr != nil {
		return nil, terr
	}
	return u, err
}

func parseListEntry(s, defaultScheme string) (*url.URL, error) {
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		// scheme://host:port:user:pass, as some tools export a list: not a
		// URL (its "port" would be port:user:pass), so it is read as the
		// seller format with that scheme.
		if sc := strings.ToLower(scheme); listSchemes[sc] {
			if host, r, err := cutHost(rest); err == nil && !strings.Contains(host, "@") {
				if port, creds, ok := strings.Cut(r, ":"); ok && isDigits(port) && creds != "" {
					return parseListEntry(rest, sc)
				}
			}
		}
		return parseListURL(s)
	}
	var user, pass, hostport string
	hasUser := false
	host, rest, cutErr := cutHost(s)
	port, creds, hasCreds := strings.Cut(rest, ":")
	switch {
	case cutErr == nil && isDigits(port) && !strings.Contains(host, "@"):
		// host:port or host:port:user:pass. Tried first so that a password
		// containing '@' does not turn the line into user:pass@host:port.
		hostport = net.JoinHostPort(host, port)
		if hasCreds {
			user, pass, hasUser = strings.Cut(creds, ":")
			if !hasUser {
				return nil, errors.New("want host:port:user:pass, found only a user after the port")
			}
		}
	case strings.Contains(s, "@"):
		// user:pass@host:port, split at the last '@'.
		at := strings.LastIndexByte(s, '@')
		hostport = s[at+1:]
		var ok bool
		user, pass, ok = strings.Cut(s[:at], ":")
		if !ok {
			return nil, errors.New("credentials before '@' must be user:pass")
		}
		hasUser = true
	case cutErr != nil:
		return nil, cutErr
	default:
		// user:pass:host:port, read from the right. The text after the
		// first ':' is no port, and may be a password: never quoted.
		var ok bool
		if user, pass, hostport, ok = cutUserPassHostPort(s); !ok {
			return nil, errors.New("invalid port: want host:port, host:port:user:pass, user:pass:host:port or user:pass@host:port")
		}
		hasUser = true
	}
	host, port, err := splitListHostPort(hostport)
	if err != nil {
		return nil, err
	}
	u := &url.URL{Scheme: defaultScheme, Host: net.JoinHostPort(host, port)}
	if hasUser {
		if user == "" {
			return nil, errors.New("empty username")
		}
		u.User = url.UserPassword(user, pass)
	}
	return u, nil
}

// cutUserPassHostPort splits "user:pass:host:port" (some sellers' order;
// the password may contain ':') from the right: the port, then the host
// (bracketed when IPv6), then user and password at the first ':'. A line
// whose second field is a port was already read as host:port:user:pass.
func cutUserPassHostPort(s string) (user, pass, hostport string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || !isDigits(s[i+1:]) {
		return "", "", "", false
	}
	port, rest := s[i+1:], s[:i]
	var host, creds string
	if strings.HasSuffix(rest, "]") {
		j := strings.LastIndexByte(rest, '[')
		if j < 1 || rest[j-1] != ':' {
			return "", "", "", false
		}
		host, creds = rest[j+1:len(rest)-1], rest[:j-1]
	} else {
		j := strings.LastIndexByte(rest, ':')
		if j < 0 {
			return "", "", "", false
		}
		host, creds = rest[j+1:], rest[:j]
	}
	user, pass, ok = strings.Cut(creds, ":")
	if !ok || host == "" {
		return "", "", "", false
	}
	return user, pass, net.JoinHostPort(host, port), true
}

// dropQuoted removes the double-quoted parts of s (and the space before
// each): `invalid port ":80:u:pw" after host` becomes `invalid port after host`.
// net/url quotes with %q, so a quote inside is escaped (`":Aa4s\"Ss5t'"`)
// and the part ends at the first quote that is not: ending it at the
// escaped one showed the rest of the password.
func dropQuoted(s string) string {
	for {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			return s
		}
		q, err := strconv.QuotedPrefix(s[i:])
		if err != nil {
			return strings.TrimSpace(s[:i]) // no end: all of it may be secret
		}
		s = strings.TrimRight(s[:i], " ") + s[i+len(q):]
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// cutHost splits "host:rest" or "[v6]:rest" at the colon after the host.
func cutHost(s string) (host, rest string, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("missing ']' after IPv6 address")
		}
		host, rest = s[1:end], s[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return "", "", errors.New("missing port")
		}
		return host, rest[1:], nil
	}
	host, rest, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", errors.New("missing port")
	}
	return host, rest, nil
}

func splitListHostPort(hp string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(hp)
	if err != nil {
		return "", "", errors.New("want host:port")
	}
	if host == "" {
		return "", "", errors.New("empty host")
	}
	if strings.ContainsAny(host, " \t/?#@[]") {
		return "", "", fmt.Errorf("invalid host %q", host)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		// A port that is not a number of up to five digits is more
		// likely a piece of a password (user:pass:host:port read as
		// host:port:user:pass for a numeric password, a password holding
		// '@' or ':' on a line without its host): not quoted.
		if len(port) > 5 || !isDigits(port) {
			return "", "", errors.New("invalid port: want a number from 1 to 65535")
		}
		return "", "", fmt.Errorf("invalid port %q", port)
	}
	return host, port, nil
}

// parseListURL handles scheme://... lines. url.Parse errors quote the whole
// input, so only their inner cause is used, with the userinfo scrubbed.
func parseListURL(s string) (*url.URL, error) {
	userinfo := ""
	if i := strings.Index(s, "://"); i >= 0 {
		rest := s[i+3:]
		if j := strings.IndexAny(rest, "/?#"); j >= 0 {
			rest = rest[:j]
		}
		if at := strings.LastIndexByte(rest, '@'); at >= 0 {
			userinfo = rest[:at]
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.Index(s, "://"); i >= 0 {
			// "socks5://bob:x#y@host:port": net/url ends the authority at
			// the '#' and complains about a port; say what is wrong, as
			// CheckURL does for [[upstream]] url.
			if rest := s[i+3:]; strings.ContainsAny(rest, "/?#") && strings.Contains(rest[strings.IndexAny(rest, "/?#"):], "@") {
				return nil, errors.New("'/', '?' or '#' before the '@': percent-encode them in the password (%2F, %3F, %23)")
			}
		}
		var ue *url.Error
		msg := "invalid URL"
		if errors.As(err, &ue) {
			// net/url quotes the offending part ("invalid port \":80:u:pw\"
			// after host"), which can hold a password: drop what it quotes.
			msg = "invalid URL: " + dropQuoted(ue.Err.Error())
		}
		if userinfo != "" {
			msg = strings.ReplaceAll(msg, userinfo, "xxxxx")
			if _, p, ok := strings.Cut(userinfo, ":"); ok && p != "" {
				msg = strings.ReplaceAll(msg, p, "xxxxx")
			}
		}
		return nil, errors.New(msg)
	}
	if !listSchemes[u.Scheme] {
		return nil, fmt.Errorf("unsupported scheme %q (want socks5, http or https)", u.Scheme)
	}
	if u.Opaque != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, errors.New("unexpected path, query or fragment after host:port")
	}
	host, port, err := splitListHostPort(u.Host)
	if err != nil {
		return nil, err
	}
	if u.User != nil && u.User.Username() == "" {
		return nil, errors.New("empty username")
	}
	return &url.URL{Scheme: u.Scheme, User: u.User, Host: net.JoinHostPort(host, port)}, nil
}
