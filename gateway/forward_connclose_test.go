package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestForwardAnswerConnectionCloseNames: the fields a target's answer
// names in its Connection header are hop-by-hop and not relayed (RFC 9110
// section 7.6.1), also when "close" is among the names. net/http's
// response reader deletes an HTTP/1.1 answer's Connection header when it
// holds "close", so `Connection: close, X-Keep` let X-Keep reach the
// client (with `keep-alive, X-Keep` it was removed). Both clients (GET:
// lean, POST: the Transport), direct and through an http:// upstream, on a
// fresh and on a kept-alive upstream connection, and after an interim
// answer whose own Connection names another field.
func TestForwardAnswerConnectionCloseNames(t *testing.T) {
	const rest = "X-Keep: v\r\nX-Stay: yes\r\nContent-Length: 3\r\n\r\nok\n"
	for _, tc := range []struct{ name, answer string }{
		{"close first", "HTTP/1.1 200 OK\r\nConnection: close, X-Keep\r\n" + rest},
		{"close last", "HTTP/1.1 200 OK\r\nConnection: X-Keep, close\r\n" + rest},
		{"two lines", "HTTP/1.1 200 OK\r\nconnection: close\r\nConnection:X-Keep\r\n" + rest},
		{"folded", "HTTP/1.1 200 OK\r\nConnection: close,\r\n X-Keep\r\n" + rest},
		{"after an interim answer", "HTTP/1.1 100 Continue\r\nConnection: X-Stay\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nConnection: close, X-Keep\r\n" + rest},
		{"keep-alive", "HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Keep\r\n" + rest},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nConnection: close, X-Keep\r\n" + rest},
	} {
		for _, via := range []string{"direct", "http"} {
			for _, method := range forwardMethods {
				t.Run(fmt.Sprintf("%s/%s/%s", tc.name, via, method), func(t *testing.T) {
					// Request 0 goes on a fresh upstream connection, 2 on
					// the one that carried 1 (its answer keeps it alive).
					answers := serveAnswers(false, tc.answer, "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n")
					rt := newRawTarget(t, answers)
					url := "direct://"
					if via == "http" {
						url = "http://" + rt.Addr() // it answers as the target would through it
					}
					srv, _ := startGateway(t, "allow_private_destinations = true\n[pool]\nstart_eligible = true\n"+
						"[[upstream]]\nurl = \""+url+"\"\nname = \"up\"\n")
					for i := range 3 {
						resp, body, err := askForward(t, srv, method, "http://"+rt.Addr()+"/")
						if err != nil || resp.StatusCode != http.StatusOK || body != "ok\n" {
							t.Fatalf("request %d: %v %q %v", i, statusOf(resp), body, err)
						}
						if i == 1 {
							continue
						}
						if v := resp.Header.Values("X-Keep"); len(v) != 0 {
							t.Errorf("request %d: X-Keep %q relayed: the answer's Connection names it", i, v)
						}
						if v := resp.Header.Get("X-Stay"); v != "yes" {
							t.Errorf("request %d: X-Stay %q, want yes (named by no final Connection)", i, v)
						}
					}
				})
			}
		}
	}
}

// TestConnFields: the Connection values connFields reads off a head, fed
// whole and byte by byte, and when it leaves a response as it is.
func TestConnFields(t *testing.T) {
	long := strings.Repeat("a", 70<<10)
	for _, tc := range []struct {
		name, bytes string
		want        []string // nil: not done
	}{
		{"one", "HTTP/1.1 200 OK\r\nConnection: close, X-A\r\n\r\n", []string{"close, X-A"}},
		{"bare LF", "HTTP/1.1 200 OK\nconnection:close\nCONNECTION: X-A \n\n", []string{"close", "X-A"}},
		{"folded", "HTTP/1.1 200 OK\r\nConnection: close,\r\n\tX-A\r\nX-B: 1\r\n  X-C\r\n\r\n", []string{"close, X-A"}},
		{"none", "HTTP/1.1 200 OK\r\nConnectio: close\r\nX-Connection: close\r\n\r\n", []string{}},
		{"long fields", "HTTP/1.1 200 OK\r\nX-Long: " + long + "\r\nConnection: close\r\nCookie: " + long + "\r\n\r\n", []string{"close"}},
		{"interims", "HTTP/1.1 100 Continue\r\nConnection: X-A\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nConnection: close\r\n\r\n", []string{"close"}},
		{"101 is final", "HTTP/1.1 101 Switching\r\nConnection: upgrade\r\n\r\n", []string{"upgrade"}},
		{"body ignored", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 20\r\n\r\nConnection: X-A\r\n\r\n", []string{"close"}},
		{"head not ended", "HTTP/1.1 200 OK\r\nConnection: close\r\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, step := range []int{len(tc.bytes), 1, 7} {
				var s connFields
				s.begin()
				for b := []byte(tc.bytes); len(b) > 0; {
					n := min(step, len(b))
					s.feed(b[:n])
					b = b[n:]
				}
				if tc.want == nil {
					if s.done {
						t.Errorf("step %d: done with %q, want not done", step, s.fields)
					}
					continue
				}
				if !s.done || strings.Join(s.fields, "|") != strings.Join(tc.want, "|") {
					t.Errorf("step %d: done %v fields %q, want %q", step, s.done, s.fields, tc.want)
				}
			}
		})
	}
	// keep changes only an answer net/http marked Close and took the
	// Connection of, whose head had "close" in it.
	var s connFields
	s.begin()
	s.feed([]byte("HTTP/1.1 200 OK\r\nConnection: close, X-A\r\n\r\n"))
	for _, tc := range []struct {
		name   string
		resp   *http.Response
		change bool
	}{
		{"deleted", &http.Response{Close: true, Header: http.Header{}}, true},
		{"not Close", &http.Response{Header: http.Header{}}, false},
		{"still there", &http.Response{Close: true, Header: http.Header{"Connection": {"close"}}}, false},
	} {
		before := fmt.Sprint(tc.resp.Header)
		s.keep(tc.resp)
		if changed := fmt.Sprint(tc.resp.Header) != before; changed != tc.change {
			t.Errorf("%s: header %v, changed %v, want %v", tc.name, tc.resp.Header, changed, tc.change)
		}
	}
}
