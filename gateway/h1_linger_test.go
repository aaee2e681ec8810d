package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
)

// limitTarget is a net/http server that answers 413 to a request body
// over 64 KiB, as a handler behind http.MaxBytesReader does: it stops
// reading, and net/http closes the connection after the answer (it reads
// up to 256 KiB more, then half-closes and resets).
func limitTarget(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, http.MaxBytesReader(w, r.Body, 64<<10)); err != nil {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		}
	})}
	go hs.Serve(ln) // owner: this test; ends when Cleanup closes the server
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// bigUpload sends a POST with a body of size bytes to target through the
// gateway's HTTP front, writing the body on its own goroutine while it
// reads the answer, as curl does (or, with sendFirst, the whole body
// before it reads, as Python's http.client does); it closes the
// connection once the answer is read, and returns it (nil when the
// connection failed first).
func bigUpload(t *testing.T, srv *Server, target string, size int64, sendFirst bool) *http.Response {
	t.Helper()
	c, br := h1Dial(t, srv)
	fmt.Fprintf(c, "POST http://%s/upload HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", target, target, size)
	done := make(chan error, 1)
	go func() { // owner: bigUpload; ends when a write fails (the connection closed) or the body is sent
		buf := make([]byte, 64<<10)
		for sent := int64(0); sent < size; sent += int64(len(buf)) {
			if _, err := c.Write(buf); err != nil {
				done <- fmt.Errorf("after %d body bytes: %w", sent, err)
				return
			}
		}
		done <- nil
	}()
	if sendFirst {
		// Such a client gives up when its send fails (Python's raises
		// BrokenPipeError): it never reads the answer.
		if err := <-done; err != nil {
			t.Logf("upload: sending the body: %v", err)
			c.Close()
			return nil
		}
		done <- nil
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	c.Close()
	<-done
	if err != nil {
		t.Logf("upload: %v", err)
		return nil
	}
	return resp
}

// TestH1EarlyAnswerToBigUploadIsRead: a target's early answer (413) to an
// upload it does not read reaches the client, every time. rotor used to
// drain at most 1 MiB of the rest of the body before closing, which a
// loopback client sends in a few milliseconds: the close then reset the
// connection and the client lost the 413 (about 1 upload in 15).
func TestH1EarlyAnswerToBigUploadIsRead(t *testing.T) {
	target := limitTarget(t)
	srv := directGateway(t)
	for _, tc := range []struct {
		name      string
		size      int64
		sendFirst bool
	}{
		{"reading while sending", 1 << 30, false},
		{"sending all first", 16 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range 40 {
				resp := bigUpload(t, srv, target, tc.size, tc.sendFirst)
				if resp == nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
					t.Fatalf("upload %d: answer %v, want the target's 413", i, statusOf(resp))
				}
			}
		})
	}
}
