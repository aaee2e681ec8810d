package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestForwardRelaysInterimAnswers: a target's informational answers (102
// Processing, 103 Early Hints) reach an HTTP/1.1 client ahead of the final
// one, with their fields (RFC 9110 section 15.2: a proxy MUST forward
// them); both forward paths read past them and dropped them. A target's
// 100 Continue is not relayed (rotor answers Expect: 100-continue
// itself), and an HTTP/1.0 client gets no 1xx at all (a server MUST NOT
// send it one).
func TestForwardRelaysInterimAnswers(t *testing.T) {
	const answer = "HTTP/1.1 100 Continue\r\n\r\n" +
		"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\nX-Rotor-Upstream: forged\r\nConnection: x-hop\r\nX-Hop: 1\r\n\r\n" +
		"HTTP/1.1 102 Processing\r\n\r\n" +
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
	rt := newRawTarget(t, func(c net.Conn, br *bufio.Reader, rt *rawTarget) {
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, req.Body); err != nil {
				return
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	})
	srv := directGateway(t)
	for _, tc := range []struct {
		name, proto, method, fields, body string
		want                              []int
	}{
		// GET takes the lean client, POST the Transport.
		{"GET", "HTTP/1.1", "GET", "", "", []int{103, 102, 200}},
		{"POST", "HTTP/1.1", "POST", "Content-Length: 5\r\n", "hello", []int{103, 102, 200}},
		{"POST expecting 100-continue", "HTTP/1.1", "POST", "Content-Length: 5\r\nExpect: 100-continue\r\n", "hello", []int{100, 103, 102, 200}},
		{"GET, HTTP/1.0", "HTTP/1.0", "GET", "", "", []int{200}},
		{"POST, HTTP/1.0", "HTTP/1.0", "POST", "Content-Length: 5\r\n", "hello", []int{200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, br := h1Dial(t, srv)
			fmt.Fprintf(c, "%s http://%s/p %s\r\nHost: %[2]s\r\n%[4]s\r\n", tc.method, rt.Addr(), tc.proto, tc.fields)
			var got []int
			var hints http.Header
			for {
				if len(got) == 0 && strings.Contains(tc.fields, "100-continue") {
					// The body goes once rotor's 100 Continue came.
					r, err := http.ReadResponse(br, &http.Request{Method: tc.method})
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, r.StatusCode)
					io.WriteString(c, tc.body)
					continue
				}
				if len(got) == 0 {
					io.WriteString(c, tc.body)
				}
				r, err := http.ReadResponse(br, &http.Request{Method: tc.method})
				if err != nil {
					t.Fatalf("after %v: %v", got, err)
				}
				got = append(got, r.StatusCode)
				if r.StatusCode == http.StatusEarlyHints {
					hints = r.Header
				}
				if r.StatusCode >= 200 {
					b, _ := io.ReadAll(r.Body)
					if string(b) != "ok\n" {
						t.Errorf("final answer %d %q", r.StatusCode, b)
					}
					break
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("answers %v, want %v", got, tc.want)
			}
			if hints == nil {
				return
			}
			if v := hints.Get("Link"); v != "</style.css>; rel=preload; as=style" {
				t.Errorf("103's Link = %q", v)
			}
			for _, k := range []string{"X-Rotor-Upstream", "Connection", "X-Hop"} {
				if v, ok := hints[k]; ok {
					t.Errorf("103 carries %s: %q", k, v)
				}
			}
		})
	}
	noFailures(t, srv, "up")
}
