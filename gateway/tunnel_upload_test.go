package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// Uploads longer than slow_body.first_byte (the bug: a client still
// sending for longer than first_byte had its tunnel killed and the
// upstream cooled as slow_body/first_byte). The first-byte clock counts
// from the client's last byte sent upstream; these tests upload for three
// times first_byte in bursts well inside it.
const (
	upFirstByte  = 400 * time.Millisecond
	upBursts     = 12
	upBurstSize  = 8 << 10
	upBurstEvery = 100 * time.Millisecond
	upTotal      = upBursts * upBurstSize
)

// uploadTarget is a target that reads an upload of upTotal bytes slowly
// (small reads with pauses), then answers "OK\n" and waits for the other
// side to close; with answer false it never answers. early, when set, is
// written as soon as the connection is accepted (an interim response such
// as 100 Continue). got receives the bytes each connection had read when
// its upload was complete or the connection ended.
type uploadTarget struct {
	addr string
	got  chan int64
}

func newUploadTarget(t *testing.T, early string, answer bool) *uploadTarget {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ut := &uploadTarget{addr: ln.Addr().String(), got: make(chan int64, 16)}
	go func() { // ends when the listener closes
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { // ends when the tunnel closes its side
				defer c.Close()
				if early != "" {
					if _, err := io.WriteString(c, early); err != nil {
						ut.got <- 0
						return
					}
				}
				var n int64
				buf := make([]byte, 2<<10)
				for n < upTotal {
					r, err := c.Read(buf)
					n += int64(r)
					if err != nil {
						ut.got <- n
						return
					}
					time.Sleep(2 * time.Millisecond) // a slow reader
				}
				ut.got <- n
				if answer {
					_, _ = io.WriteString(c, "OK\n")
				}
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ut
}

// upload sends upTotal bytes in upBursts bursts, upBurstEvery apart.
func upload(t *testing.T, c net.Conn) {
	t.Helper()
	chunk := []byte(strings.Repeat("u", upBurstSize))
	for i := range upBursts {
		if i > 0 {
			time.Sleep(upBurstEvery)
		}
		if _, err := c.Write(chunk); err != nil {
			t.Fatalf("burst %d of the upload: %v", i, err)
		}
	}
}

// wantReceived waits for the target's count and checks the whole upload
// arrived.
func (ut *uploadTarget) wantReceived(t *testing.T) {
	t.Helper()
	select {
	case n := <-ut.got:
		if n != upTotal {
			t.Fatalf("target read %d of %d upload bytes: the tunnel was cut mid-upload", n, upTotal)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("target never finished reading the upload")
	}
}

// connectTunnel opens an HTTP CONNECT tunnel to addr through front.
func connectTunnel(t *testing.T, front, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr)
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("CONNECT answer %q, %v", line, err)
	}
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			return c, br
		}
	}
}

// uploadGateway starts a gateway with one upstream named "up" of kind
// direct, socks5 or https, with the short slow_body limits of these tests.
func uploadGateway(t *testing.T, kind string, stall time.Duration) *Server {
	t.Helper()
	probe := upstreamtest.NewTarget(t)
	conf := fmt.Sprintf("allow_private_destinations = true\n%s\n[pool]\nstart_eligible = true\nmax_attempts = 1\n[slow_body]\nfirst_byte = %q\nstall = %q\n",
		probeConf(probe), upFirstByte.String(), stall.String())
	switch kind {
	case "direct":
		return startGatewayOpts(t, conf+"[[upstream]]\nurl = \"direct://\"\nname = \"up\"\n", Options{})
	case "socks5":
		up := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
		return startGatewayOpts(t, conf+fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL().String()), Options{})
	case "https": // TLS to the upstream: the classic relay, not the pumps
		up := upstreamtest.NewHTTPProxy(t, upstreamtest.Options{TLS: true})
		return startGatewayOpts(t, conf+fmt.Sprintf("[[upstream]]\nurl = %q\nname = \"up\"\n", up.URL().String()), Options{UpstreamTLS: up.ClientTLS()})
	}
	t.Fatalf("unknown upstream kind %q", kind)
	return nil
}

func startGatewayOpts(t *testing.T, text string, opts Options) *Server {
	t.Helper()
	text += "\n[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"\"\n"
	cfg, err := ParseConfig("t.toml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return srv
}

// openTunnel opens a tunnel to addr through the given front.
func openTunnel(t *testing.T, srv *Server, front, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	if front == "http" {
		return connectTunnel(t, srv.Addr("http"), addr)
	}
	return rawSOCKS(t, srv.Addr("socks5"), addr, nil)
}

func slowBodyFailures(srv *Server) uint64 {
	snap := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record())
	return snap.Failures[health.SlowBody]
}

// TestLongUploadIsNotSlowFirstByte: a client uploading for longer than
// first_byte gets its answer, on both fronts and through each upstream
// kind (pumped tunnels and the classic relay), and nothing counts as slow.
func TestLongUploadIsNotSlowFirstByte(t *testing.T) {
	for _, kind := range []string{"direct", "socks5", "https"} {
		for _, front := range []string{"socks5", "http"} {
			t.Run(kind+"/"+front, func(t *testing.T) {
				t.Parallel()
				ut := newUploadTarget(t, "", true)
				srv := uploadGateway(t, kind, 30*time.Second)
				c, br := openTunnel(t, srv, front, ut.addr)
				upload(t, c)
				ut.wantReceived(t)
				line, err := br.ReadString('\n')
				if err != nil || line != "OK\n" {
					t.Fatalf("answer %q, %v; want OK after the upload", line, err)
				}
				if got := slowBodyFailures(srv); got != 0 {
					t.Errorf("slow_body failures = %d, want 0 for an upload answered at once", got)
				}
				if st := srv.Tracker().Snapshot(srv.Pool().Lookup("up").Record()).State; st != health.Eligible {
					t.Errorf("upstream %v after a long upload, want eligible", st)
				}
			})
		}
	}
}

// TestSilenceAfterUploadIsSlowFirstByte: once the upload is over, a target
// that never answers is still slow_body at first_byte and the tunnel is
// closed; the upstream cools for that target host only, through a proxy
// as through direct (one silent tunnel cannot tell a silent proxy from a
// tarpit target: see TestTarpitTunnelsLeaveUpstreamsEligible).
func TestSilenceAfterUploadIsSlowFirstByte(t *testing.T) {
	for _, kind := range []string{"direct", "socks5", "https"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			ut := newUploadTarget(t, "", false)
			srv := uploadGateway(t, kind, 30*time.Second)
			c, br := openTunnel(t, srv, "socks5", ut.addr)
			upload(t, c)
			ut.wantReceived(t)
			if _, err := br.ReadByte(); err == nil {
				t.Fatal("a byte came back from a silent target")
			} else if isTimeout(err) {
				t.Fatalf("tunnel not closed after first_byte of silence: %v", err)
			}
			rec := srv.Pool().Lookup("up").Record()
			waitFor(t, func() bool { return srv.Tracker().Snapshot(rec).Failures[health.SlowBody] > 0 })
			snap := srv.Tracker().Snapshot(rec)
			found := false
			for _, ct := range snap.Counts {
				found = found || (ct.Class == health.SlowBody && ct.Stage == health.StageFirstByte)
			}
			if !found {
				t.Fatalf("counts = %+v, want slow_body at first_byte", snap.Counts)
			}
			if snap.State != health.Eligible {
				t.Errorf("%s upstream %v after one slow target, want eligible", kind, snap.State)
			}
			host, _, _ := net.SplitHostPort(ut.addr)
			if len(snap.Targets) != 1 || snap.Targets[0].Host != host || snap.Targets[0].Reason != health.SlowBody {
				t.Errorf("per-target cooldowns = %+v, want slow_body for %s only", snap.Targets, host)
			}
		})
	}
}

// TestUploadAfterEarlyResponseIsNotStall: the target answers at once
// (100 Continue) and then reads a long upload before its final answer; the
// client is the one sending all along, so no stall is reported however
// long the upload lasts.
func TestUploadAfterEarlyResponseIsNotStall(t *testing.T) {
	for _, kind := range []string{"direct", "socks5", "https"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			const interim = "HTTP/1.1 100 Continue\r\n\r\n"
			ut := newUploadTarget(t, interim, true)
			srv := uploadGateway(t, kind, 300*time.Millisecond)
			c, br := openTunnel(t, srv, "socks5", ut.addr)
			head := make([]byte, len(interim))
			upload(t, c)
			ut.wantReceived(t)
			if _, err := io.ReadFull(br, head); err != nil || string(head) != interim {
				t.Fatalf("interim response %q, %v", head, err)
			}
			line, err := br.ReadString('\n')
			if err != nil || line != "OK\n" {
				t.Fatalf("answer %q, %v; want OK after the upload", line, err)
			}
			if got := slowBodyFailures(srv); got != 0 {
				t.Errorf("slow_body failures = %d during an upload after an early response, want 0", got)
			}
		})
	}
}

// TestRelayLongUpload drives the classic relay (no reactor) directly over
// loopback sockets: an upload longer than first_byte is answered, and a
// target silent after the upload is a first-byte failure.
func TestRelayLongUpload(t *testing.T) {
	for _, answer := range []bool{true, false} {
		t.Run(fmt.Sprintf("answer=%v", answer), func(t *testing.T) {
			t.Parallel()
			ut := newUploadTarget(t, "", answer)
			app, cside := loopbackPair(t)
			up, err := net.Dial("tcp", ut.addr)
			if err != nil {
				t.Fatal(err)
			}
			var reports atomic.Int32
			done := make(chan relayResult, 1)
			go func() {
				done <- relay(cside, up, nil, SlowBodyConfig{FirstByte: upFirstByte, Stall: 30 * time.Second}, 0,
					func(*health.Failure) { reports.Add(1) }, nil)
			}()
			_ = app.SetDeadline(time.Now().Add(10 * time.Second))
			upload(t, app)
			ut.wantReceived(t)
			br := bufio.NewReader(app)
			line, err := br.ReadString('\n')
			if answer {
				if err != nil || line != "OK\n" {
					t.Fatalf("answer %q, %v; want OK after the upload", line, err)
				}
				app.Close()
			} else if err == nil || isTimeout(err) {
				t.Fatalf("silent target: read %q, %v; want the tunnel closed", line, err)
			}
			res := <-done
			switch {
			case answer && res.Failure != nil:
				t.Errorf("relay failure %v for an answered upload", res.Failure)
			case !answer && (res.Failure == nil || res.Failure.Stage != health.StageFirstByte):
				t.Errorf("relay failure %v, want slow_body at first_byte", res.Failure)
			}
			if res.Up != upTotal {
				t.Errorf("relay counted %d bytes up, want %d", res.Up, upTotal)
			}
			if n := reports.Load(); n != 0 {
				t.Errorf("%d stall reports during an upload", n)
			}
		})
	}
}

// loopbackPair returns the two ends of a loopback TCP connection.
func loopbackPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := ln.Accept()
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// isTimeout reports a deadline error: the test's own read deadline ran out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
