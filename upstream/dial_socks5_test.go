package upstream

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

func TestSOCKS5Success(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	_, port, _ := net.SplitHostPort(target.Addr())
	tests := []struct {
		name   string
		opts   upstreamtest.Options
		scheme string
		user   *[2]string // credentials rotor sends; nil = from the fake's URL
		addr   string
	}{
		{name: "no auth", opts: upstreamtest.Options{}, addr: target.Addr()},
		{name: "auth", opts: upstreamtest.Options{Username: "u", Password: "p:w@d"}, addr: target.Addr()},
		{name: "socks5h scheme", opts: upstreamtest.Options{Username: "u", Password: "p"}, scheme: "socks5h", addr: target.Addr()},
		{name: "hostname sent unresolved", opts: upstreamtest.Options{}, addr: "localhost:" + port},
		// dante in no-auth mode picks 00 from {00, 02} (UPSTREAM-SIGNALS.md).
		{name: "credentials to a no-auth proxy", opts: upstreamtest.Options{}, user: &[2]string{"u", "p"}, addr: target.Addr()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fk := upstreamtest.NewSOCKS5(t, tt.opts)
			u := fk.URL()
			if tt.scheme != "" {
				u.Scheme = tt.scheme
			}
			if tt.user != nil {
				u.User = urlUser(tt.user[0], tt.user[1])
			}
			c, err := dial(t, mustDialer(t, u, testCfg()), tt.addr)
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			if _, ok := c.(*net.TCPConn); !ok {
				t.Fatalf("conn is %T, want *net.TCPConn (splice)", c)
			}
			roundTrip(t, c)
			if got := fk.Tunnels(); got != 1 {
				t.Fatalf("Tunnels() = %d, want 1", got)
			}
		})
	}
}

func TestSOCKS5Faults(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	closed := upstreamtest.ClosedPort(t)
	auth := upstreamtest.Options{Username: "u", Password: "p"}
	reply := func(code int) upstreamtest.Mode { return upstreamtest.Mode{Fault: upstreamtest.Reply, Code: code} }
	tests := []struct {
		name      string
		opts      upstreamtest.Options
		mode      upstreamtest.Mode
		noCreds   bool   // rotor sends no credentials
		badPass   bool   // rotor sends a wrong password
		addr      string // default: the target
		class     health.Class
		stage     health.Stage
		replyCode int // expected *ReplyError code, 0 = none
	}{
		{name: "refuse TCP", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.Refuse}, class: health.Refused, stage: health.StageDial},
		{name: "close after accept", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.CloseAfterAccept}, class: health.UpstreamError, stage: health.StageProxyHandshake},
		{name: "black hole", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.BlackHole}, class: health.Timeout, stage: health.StageProxyHandshake},
		// The proxy answered the greeting and auth, then never answers the
		// CONNECT: it is waiting for a target that never accepts (dante's
		// REP 6 comes after ~31 s, microsocks never answers). The target's
		// timeout, not the proxy's.
		{name: "hang after request", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}, class: health.TargetTimeout, stage: health.StageTargetConnect},
		{name: "hang after request, no auth", mode: upstreamtest.Mode{Fault: upstreamtest.HangConnect}, class: health.TargetTimeout, stage: health.StageTargetConnect},
		{name: "garbage", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.Garbage}, class: health.UpstreamError, stage: health.StageProxyHandshake},
		{name: "garbage version 5", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.Garbage, Garbage: []byte{5, 0x7f}}, class: health.UpstreamError, stage: health.StageProxyHandshake},
		{name: "reject auth", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.RejectAuth}, class: health.AuthRejected, stage: health.StageProxyAuth},
		{name: "wrong password", opts: auth, badPass: true, class: health.AuthRejected, stage: health.StageProxyAuth},
		{name: "no acceptable method", opts: auth, mode: upstreamtest.Mode{Fault: upstreamtest.NoAcceptableMethod}, class: health.AuthRejected, stage: health.StageProxyAuth},
		{name: "credentials required, none sent", opts: auth, noCreds: true, class: health.AuthRejected, stage: health.StageProxyAuth},
		{name: "REP 1 general failure", opts: auth, mode: reply(1), class: health.UpstreamError, stage: health.StageTargetConnect, replyCode: 1},
		{name: "REP 2 ruleset", opts: auth, mode: reply(2), class: health.UpstreamError, stage: health.StageTargetConnect, replyCode: 2},
		{name: "REP 3 network unreachable", opts: auth, mode: reply(3), class: health.TargetUnreachable, stage: health.StageTargetConnect, replyCode: 3},
		{name: "REP 4 host unreachable", opts: auth, mode: reply(4), class: health.TargetUnreachable, stage: health.StageTargetConnect, replyCode: 4},
		{name: "REP 5 refused", opts: auth, mode: reply(5), class: health.TargetUnreachable, stage: health.StageTargetConnect, replyCode: 5},
		{name: "REP 6 TTL expired", opts: auth, mode: reply(6), class: health.TargetTimeout, stage: health.StageTargetConnect, replyCode: 6},
		{name: "REP 7 command", opts: auth, mode: reply(7), class: health.UpstreamError, stage: health.StageTargetConnect, replyCode: 7},
		{name: "REP 8 atyp", opts: auth, mode: reply(8), class: health.UpstreamError, stage: health.StageTargetConnect, replyCode: 8},
		{name: "REP 8 atyp, IPv6 target", opts: auth, mode: reply(8), addr: "[::1]:443", class: health.UpstreamError, stage: health.StageTargetConnect, replyCode: 8},
		{name: "REP 9 unassigned", opts: auth, mode: reply(9), class: health.UpstreamError, stage: health.StageTargetConnect, replyCode: 9},
		{name: "target port closed", opts: auth, addr: closed, class: health.TargetUnreachable, stage: health.StageTargetConnect, replyCode: 5},
	}
	cfg := testCfg()
	cfg.HandshakeTimeout = 200 * time.Millisecond
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fk := upstreamtest.NewSOCKS5(t, tt.opts)
			fk.SetMode(tt.mode)
			u := fk.URL()
			if tt.noCreds {
				u.User = nil
			}
			if tt.badPass {
				u.User = urlUser("u", "wrong")
			}
			addr := tt.addr
			if addr == "" {
				addr = target.Addr()
			}
			start := time.Now()
			_, err := dial(t, mustDialer(t, u, rowCfg(cfg, tt.class, tt.mode)), addr)
			f := wantFailure(t, err, tt.class, tt.stage)
			if host, _, _ := net.SplitHostPort(addr); f.Target != host {
				t.Errorf("Target = %q, want %q", f.Target, host)
			}
			var re *ReplyError
			if got := errors.As(err, &re); got != (tt.replyCode != 0) || got && int(re.Code) != tt.replyCode {
				t.Errorf("ReplyError = %v, want code %d", re, tt.replyCode)
			}
			if el := time.Since(start); el > 2*time.Second {
				t.Errorf("took %v", el)
			}
		})
	}
}

// TestSOCKS5Recovery takes an upstream down and brings it back.
func TestSOCKS5Recovery(t *testing.T) {
	target := upstreamtest.NewTarget(t)
	fk := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	d := mustDialer(t, fk.URL(), testCfg())
	fk.SetMode(upstreamtest.Mode{Fault: upstreamtest.Refuse})
	_, err := dial(t, d, target.Addr())
	wantFailure(t, err, health.Refused, health.StageDial)
	fk.SetMode(upstreamtest.Mode{})
	c, err := dial(t, d, target.Addr())
	if err != nil {
		t.Fatalf("after recovery: %v", err)
	}
	roundTrip(t, c)
}

func TestSOCKS5ConnectRequest(t *testing.T) {
	tests := []struct {
		host    string
		want    []byte
		wantErr bool
	}{
		{host: "127.0.0.1", want: []byte{5, 1, 0, 1, 127, 0, 0, 1, 0x1f, 0x90}},
		{host: "::ffff:10.0.0.1", want: []byte{5, 1, 0, 1, 10, 0, 0, 1, 0x1f, 0x90}},
		{host: "::1", want: append(append([]byte{5, 1, 0, 4}, netip.IPv6Loopback().AsSlice()...), 0x1f, 0x90)},
		{host: "example.com", want: append(append([]byte{5, 1, 0, 3, 11}, "example.com"...), 0x1f, 0x90)},
		{host: strings.Repeat("a", 255), want: append(append([]byte{5, 1, 0, 3, 255}, strings.Repeat("a", 255)...), 0x1f, 0x90)},
		{host: strings.Repeat("a", 256), wantErr: true},
		{host: "", wantErr: true},
		// No controls or spaces in a domain name (a second line of defence
		// behind the fronts' own checks).
		{host: "a\x00b.example", wantErr: true},
		{host: "a\r\nb.example", wantErr: true},
		{host: "a b.example", wantErr: true},
		{host: "fe80::1%eth0", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.host[:min(len(tt.host), 20)], func(t *testing.T) {
			got, err := socks5ConnectRequest(tt.host, 8080)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidTarget) {
					t.Fatalf("err = %v, want ErrInvalidTarget", err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("got % x, %v; want % x", got, err, tt.want)
			}
		})
	}
}

func TestReadConnectReply(t *testing.T) {
	tests := []struct {
		name      string
		in        []byte
		want      string // bound address, "" = none
		wantCode  int    // ReplyError code
		malformed bool
	}{
		{name: "ipv4", in: []byte{5, 0, 0, 1, 10, 1, 2, 3, 0x04, 0x38}, want: "10.1.2.3:1080"},
		{name: "microsocks zero bound", in: []byte{5, 0, 0, 1, 0, 0, 0, 0, 0, 0}, want: "0.0.0.0:0"},
		{name: "ipv6", in: append(append([]byte{5, 0, 0, 4}, netip.IPv6Loopback().AsSlice()...), 0, 80), want: "[::1]:80"},
		{name: "domain", in: append([]byte{5, 0, 0, 3, 4}, "host\x00\x50"...)},
		{name: "rep 5", in: []byte{5, 5, 0, 1}, wantCode: 5},
		{name: "rep 255", in: []byte{5, 255, 0, 1}, wantCode: 255},
		{name: "bad version", in: []byte{4, 0, 0, 1, 0, 0, 0, 0, 0, 0}, malformed: true},
		{name: "bad atyp", in: []byte{5, 0, 0, 9, 0, 0, 0, 0, 0, 0}, malformed: true},
		{name: "empty", in: nil, malformed: true},
		{name: "short header", in: []byte{5, 0}, malformed: true},
		{name: "short ipv4", in: []byte{5, 0, 0, 1, 1, 2}, malformed: true},
		{name: "short domain", in: []byte{5, 0, 0, 3, 10, 'a'}, malformed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bytes.NewReader(tt.in)
			got, err := readConnectReply(r)
			var re *ReplyError
			switch {
			case tt.malformed:
				if !errors.Is(err, ErrMalformedReply) {
					t.Fatalf("err = %v, want ErrMalformedReply", err)
				}
			case tt.wantCode != 0:
				if !errors.As(err, &re) || int(re.Code) != tt.wantCode {
					t.Fatalf("err = %v, want ReplyError %d", err, tt.wantCode)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if tt.want != "" && got.String() != tt.want {
					t.Fatalf("bound = %s, want %s", got, tt.want)
				}
				if r.Len() != 0 {
					t.Fatalf("%d bytes left unread: the reply must be consumed exactly", r.Len())
				}
			}
		})
	}
}

func TestSOCKS5AuthReply(t *testing.T) {
	tests := []struct {
		in   []byte
		want error
	}{
		{in: []byte{1, 0}},
		{in: []byte{5, 0}}, // lenient on the version byte
		{in: []byte{1, 1}, want: &AuthStatusError{Status: 1}},
		{in: []byte{1, 2}, want: &AuthStatusError{Status: 2}},
		{in: []byte{1}, want: ErrMalformedReply},
	}
	for _, tt := range tests {
		err := readAuthReply(bytes.NewReader(tt.in))
		var ae *AuthStatusError
		switch want := tt.want.(type) {
		case nil:
			if err != nil {
				t.Errorf("% x: err = %v", tt.in, err)
			}
		case *AuthStatusError:
			if !errors.As(err, &ae) || ae.Status != want.Status {
				t.Errorf("% x: err = %v, want status %d", tt.in, err, want.Status)
			}
		default:
			if !errors.Is(err, want) {
				t.Errorf("% x: err = %v, want %v", tt.in, err, want)
			}
		}
	}
}

func TestReplyErrorString(t *testing.T) {
	for code, want := range map[byte]string{
		1: "socks5 reply 1: general SOCKS server failure",
		5: "socks5 reply 5: connection refused",
		6: "socks5 reply 6: TTL expired",
		9: "socks5 reply 9: unknown code",
	} {
		if got := (&ReplyError{Code: code}).Error(); got != want {
			t.Errorf("code %d: %q, want %q", code, got, want)
		}
	}
}

func BenchmarkReadConnectReply(b *testing.B) {
	msg := []byte{5, 0, 0, 1, 10, 1, 2, 3, 0x04, 0x38}
	r := bytes.NewReader(msg)
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(msg)
		if _, err := readConnectReply(r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSOCKS5ConnectRequest(b *testing.B) {
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := socks5ConnectRequest("host"+strconv.Itoa(i&7)+".example.com", 443); err != nil {
			b.Fatal(err)
		}
	}
}

// rowCfg gives a fault-table row the short handshake timeout only when it
// expects a deadline (a timeout, or a proxy that hangs after the request):
// a row expecting a proxy's answer keeps a wide one, so a loaded machine
// (CI runs every package under -race on two cores) cannot turn a slow
// answer into a timeout.
func rowCfg(cfg DialConfig, want health.Class, mode upstreamtest.Mode) DialConfig {
	if want != health.Timeout && mode.Fault != upstreamtest.HangConnect {
		cfg.HandshakeTimeout = 5 * time.Second
	}
	return cfg
}
