package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// serveHTTPProxy is a plain HTTP proxy (RFC 9110 CONNECT and absolute-URI
// forwarding) that the relay serves only for relay-as-gateway plumbing runs
// (-gateway-is-relay), so the HTTP-front phases can be exercised before a
// real gateway exists. It is not the baseline for anything.
func serveHTTPProxy(c *net.TCPConn, cp copyFunc) {
	br := bufio.NewReader(c)
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
	}
	defer tr.CloseIdleConnections()
	for {
		c.SetReadDeadline(time.Now().Add(relayHandshakeTimeout))
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		c.SetReadDeadline(time.Time{})
		if req.Method == http.MethodConnect {
			proxyConnect(c, br, req, cp)
			return
		}
		if !proxyForward(c, tr, req) {
			return
		}
	}
}

// proxyConnect answers a CONNECT and splices; bytes the client pipelined
// after the request are flushed to the target first.
func proxyConnect(c *net.TCPConn, br *bufio.Reader, req *http.Request, cp copyFunc) {
	ap, err := netip.ParseAddrPort(req.Host)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
		return
	}
	t, err := dialLoopback(ap)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer t.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	if n := br.Buffered(); n > 0 {
		pending, _ := br.Peek(n)
		if _, err := t.Write(pending); err != nil {
			return
		}
	}
	splice(c, t, cp)
}

// proxyForward relays one absolute-URI request; it reports whether the
// client connection may be reused.
func proxyForward(c *net.TCPConn, tr *http.Transport, req *http.Request) bool {
	ap, err := netip.ParseAddrPort(req.URL.Host)
	if req.URL.Scheme != "http" || err != nil || !ap.Addr().IsLoopback() {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return false
	}
	out := req.Clone(req.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	resp, err := tr.RoundTrip(out)
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		return false
	}
	defer resp.Body.Close()
	bw := bufio.NewWriter(c)
	if resp.Write(bw) != nil || bw.Flush() != nil {
		return false
	}
	return !req.Close
}
