package main

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// targets are the loopback servers the tunnels end at. They run inside the
// tool's process; the relay (a separate process) dials them.
type targets struct {
	source *tcpServer   // bulk: streams bytes to the client
	echo   *tcpServer   // setup and idle: echoes what it reads
	http   *http.Server // plain-HTTP forwarding and the gateway's probe
	httpLn net.Listener
	done   chan struct{} // closed when the HTTP serve goroutine returns
}

// bulkChunk is the write size of the source and the read size of clients.
const bulkChunk = 256 << 10

// httpBody is what the HTTP target answers to every GET.
var httpBody = []byte("rotor-bench target: ok\n")

// startTargets starts all targets on 127.0.0.1 ports chosen by the kernel,
// except the HTTP target, which listens on httpAddr (it may need a fixed
// address so an externally configured gateway can probe it).
func startTargets(httpAddr string) (*targets, error) {
	t := &targets{done: make(chan struct{})}
	var err error
	if t.source, err = listenTCP("127.0.0.1:0", serveSource); err != nil {
		return nil, err
	}
	if t.echo, err = listenTCP("127.0.0.1:0", serveEcho); err != nil {
		t.source.Close()
		return nil, err
	}
	if t.httpLn, err = net.Listen("tcp", httpAddr); err != nil {
		t.source.Close()
		t.echo.Close()
		return nil, err
	}
	t.http = &http.Server{
		Handler:           http.HandlerFunc(serveHTTPTarget),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	go func() {
		defer close(t.done)
		t.http.Serve(t.httpLn) // returns ErrServerClosed after Close
	}()
	return t, nil
}

// Close stops every target and waits for their goroutines.
func (t *targets) Close() {
	t.http.Close()
	<-t.done
	t.source.Close()
	t.echo.Close()
}

// HTTPURL is the base URL of the HTTP target.
func (t *targets) HTTPURL() string { return "http://" + t.httpLn.Addr().String() + "/" }

// serveSource reads an 8-byte big-endian byte budget (0 = unlimited) and
// writes a fixed pattern until the budget is spent or the client goes away
// (the next write then fails).
func serveSource(c *net.TCPConn) {
	var hdr [8]byte
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return
	}
	c.SetReadDeadline(time.Time{})
	left := binary.BigEndian.Uint64(hdr[:])
	for {
		chunk := sourcePattern
		if left != 0 && left < uint64(len(chunk)) {
			chunk = chunk[:left]
		}
		n, err := c.Write(chunk)
		if err != nil {
			return
		}
		if left != 0 {
			left -= uint64(n)
			if left == 0 {
				c.CloseWrite()
				io.Copy(io.Discard, c) // wait for the client's close
				return
			}
		}
	}
}

// sourcePattern is shared read-only by every source handler.
var sourcePattern = func() []byte {
	b := make([]byte, bulkChunk)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}()

// serveEcho echoes until EOF; a small buffer keeps idle tunnels cheap on the
// tool's side so it does not distort the machine under test.
func serveEcho(c *net.TCPConn) {
	var buf [512]byte
	for {
		n, err := c.Read(buf[:])
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func serveHTTPTarget(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(httpBody)))
	w.Write(httpBody)
}
