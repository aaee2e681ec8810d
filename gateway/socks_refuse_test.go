package gateway

import (
	"bytes"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// TestSOCKSOverLimitFloodIsBounded: silent connections over
// listen.max_connections hold at most maxSOCKSRefusals goroutines (and
// fds) between them; the rest are closed at once. Issue: each got its own
// refusal goroutine, fd and 2 s deadline (3,000 silent connections: 3,064
// fds and goroutines).
func TestSOCKSOverLimitFloodIsBounded(t *testing.T) {
	srv, _ := startGateway(t, "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nhandshake_timeout = \"1m\"\nmax_connections = 1\n"+noUpstreamConf)
	holdConn(t, srv.Addr("socks5"))
	if rep, err := selfCheckSOCKS(t, srv); err != nil || rep != repGeneralFailure {
		t.Fatalf("a client over the limit: rep %#x err %v, want 0x01", rep, err)
	}
	const flood = 300
	base := runtime.NumGoroutine()
	var peak int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // owner: the test; ends at stop
		defer wg.Done()
		for {
			if n := runtime.NumGoroutine(); n > peak {
				peak = n
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var cs []net.Conn
	for i := 0; i < flood; i++ {
		c, err := net.DialTimeout("tcp", srv.Addr("socks5"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	// Every one is closed: at once, or when its refusal gives up.
	for i, c := range cs {
		if _, closed := readToClose(c, 30*time.Second); !closed {
			t.Fatalf("over-limit client %d still open after 30s", i)
		}
	}
	close(stop)
	wg.Wait()
	if extra := peak - base; extra > maxSOCKSRefusals+20 {
		t.Errorf("%d silent over-limit clients held up to %d goroutines, want at most %d refusals at once", flood, extra, maxSOCKSRefusals)
	}
}

// TestSOCKSRefusalAnswer: what an over-limit client gets when its bytes
// are already there at accept, written without waiting.
func TestSOCKSRefusalAnswer(t *testing.T) {
	fail := socksReply(repGeneralFailure, nil)
	userPass := []byte{5, 1, 2, 1, 1, 'u', 2, 'p', 'w'}
	request := []byte{5, 1, 0, 1, 127, 0, 0, 1, 0, 80}
	tests := []struct {
		name     string
		in       []byte
		want     []byte
		complete bool
	}{
		{"nothing yet", nil, nil, false},
		{"half a greeting", []byte{5, 2, 0}, nil, false},
		{"greeting only", []byte{5, 1, 0}, nil, false},
		{"no-auth, pipelined", append([]byte{5, 2, 0, 2}, request...), append([]byte{5, 0}, fail...), true},
		{"no-auth, request head only", []byte{5, 1, 0, 5, 1, 0, 3}, append([]byte{5, 0}, fail...), true},
		{"user/pass, pipelined", append(append([]byte(nil), userPass...), request...), append([]byte{5, 2, 1, 0}, fail...), true},
		{"user/pass, no request yet", userPass, nil, false},
		{"user/pass, half the auth", userPass[:6], nil, false},
		{"no method it can pick", []byte{5, 1, 0x80}, []byte{5, 0xFF}, true},
		{"not SOCKS5", []byte{4, 1, 0, 80}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, complete := socksRefusal(tt.in)
			if complete != tt.complete || !bytes.Equal(got, tt.want) {
				t.Errorf("socksRefusal(%x) = %x, %v; want %x, %v", tt.in, got, complete, tt.want, tt.complete)
			}
		})
	}
}
