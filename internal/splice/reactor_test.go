//go:build linux

package splice

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func newReactor(t *testing.T) *Reactor {
	t.Helper()
	r, err := NewReactor()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

type pumpEnd struct {
	n   int64
	err error
}

// TestPumpCopies sends a prefix, small bursts with pauses (each burst
// parks the pump again) and a bulk transfer through a Pump and checks every
// byte arrives in order, onData runs once and done reports the total once.
func TestPumpCopies(t *testing.T) {
	r := newReactor(t)
	srcW, src := tcpPair(t)
	dst, dstR := tcpPair(t)
	var calls, data atomic.Int32
	ends := make(chan pumpEnd, 2)
	prefix := []byte("prefix:")
	r.Pump(dst, src, prefix, func() { data.Add(1) }, func(n int64, err error) {
		calls.Add(1)
		dst.CloseWrite()
		ends <- pumpEnd{n, err}
	})
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(dstR); got <- b }()
	want := bytes.NewBuffer(append([]byte(nil), prefix...))
	for i := 0; i < 30; i++ {
		chunk := bytes.Repeat([]byte{byte(i)}, 50+i)
		want.Write(chunk)
		if _, err := srcW.Write(chunk); err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			time.Sleep(5 * time.Millisecond) // let the pump park between bursts
		}
	}
	bulk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB: hands over to splice
	want.Write(bulk)
	if _, err := srcW.Write(bulk); err != nil {
		t.Fatal(err)
	}
	srcW.CloseWrite()
	e := <-ends
	if e.err != nil {
		t.Fatalf("pump: %v", e.err)
	}
	b := <-got
	if !bytes.Equal(b, want.Bytes()) || e.n != int64(want.Len()) {
		t.Fatalf("copied %d bytes (done said %d), want %d identical bytes", len(b), e.n, want.Len())
	}
	if calls.Load() != 1 || data.Load() != 1 {
		t.Fatalf("done ran %d times, onData %d times; want 1 and 1", calls.Load(), data.Load())
	}
}

// TestPumpIdleHoldsNoGoroutine parks many idle pumps and checks they hold
// no goroutine, then wakes each with one message.
func TestPumpIdleHoldsNoGoroutine(t *testing.T) {
	r := newReactor(t)
	const n = 100
	type pair struct{ w, dstR *net.TCPConn }
	pairs := make([]pair, n)
	ends := make(chan pumpEnd, n)
	before := runtime.NumGoroutine()
	for i := range pairs {
		w, src := tcpPair(t)
		dst, dstR := tcpPair(t)
		pairs[i] = pair{w, dstR}
		r.Pump(dst, src, nil, nil, func(n int64, err error) { ends <- pumpEnd{n, err} })
	}
	// Each direction lingers briefly in the netpoller, then parks.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine()-before > 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle pumps hold %d goroutines", n, runtime.NumGoroutine()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range pairs {
		if _, err := p.w.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
	}
	buf := make([]byte, 4)
	for _, p := range pairs {
		p.dstR.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(p.dstR, buf); err != nil || string(buf) != "ping" {
			t.Fatalf("read %q, %v", buf, err)
		}
	}
	for _, p := range pairs {
		p.w.CloseWrite()
	}
	for range n {
		select {
		case e := <-ends:
			if e.err != nil || e.n != 4 {
				t.Fatalf("done(%d, %v), want (4, nil)", e.n, e.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("pumps did not end at EOF")
		}
	}
}

// TestPumpStop: an owner that closes the sockets of a parked pump and
// calls Stop gets done(net.ErrClosed) exactly once, at once.
func TestPumpStop(t *testing.T) {
	r := newReactor(t)
	_, src := tcpPair(t)
	dst, _ := tcpPair(t)
	var calls atomic.Int32
	ends := make(chan pumpEnd, 2)
	p := r.Pump(dst, src, nil, nil, func(n int64, err error) { calls.Add(1); ends <- pumpEnd{n, err} })
	src.Close()
	dst.Close()
	p.Stop()
	p.Stop()
	select {
	case e := <-ends:
		if !errors.Is(e.err, net.ErrClosed) {
			t.Fatalf("done error %v, want net.ErrClosed", e.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not finish the parked pump")
	}
	time.Sleep(20 * time.Millisecond)
	if c := calls.Load(); c != 1 {
		t.Fatalf("done ran %d times", c)
	}
}

// TestReactorCloseFinishesParked: closing the reactor ends its goroutine
// and finishes every parked pump.
func TestReactorCloseFinishesParked(t *testing.T) {
	r, err := NewReactor()
	if err != nil {
		t.Fatal(err)
	}
	ends := make(chan pumpEnd, 3)
	for range 3 {
		_, src := tcpPair(t)
		dst, _ := tcpPair(t)
		r.Pump(dst, src, nil, nil, func(n int64, err error) { ends <- pumpEnd{n, err} })
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case e := <-ends:
			if !errors.Is(e.err, net.ErrClosed) {
				t.Fatalf("done error %v, want net.ErrClosed", e.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not finish a parked pump")
		}
	}
	// A pump started after Close ends at once.
	_, src := tcpPair(t)
	dst, _ := tcpPair(t)
	r.Pump(dst, src, nil, nil, func(n int64, err error) { ends <- pumpEnd{n, err} })
	if e := <-ends; !errors.Is(e.err, net.ErrClosed) {
		t.Fatalf("pump after Close: %v", e.err)
	}
}

// pipes counts this process's open pipe descriptors.
func pipes(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// TestPumpBulkThenIdleReleasesPipe: a direction that moved bulk data
// through splice and then went quiet gives its pipe back and parks, and
// the next bytes still arrive.
func TestPumpBulkThenIdleReleasesPipe(t *testing.T) {
	r := newReactor(t)
	srcW, src := tcpPair(t)
	dst, dstR := tcpPair(t)
	before := pipes(t)
	ends := make(chan pumpEnd, 1)
	r.Pump(dst, src, nil, nil, func(n int64, err error) { ends <- pumpEnd{n, err} })
	bulk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	go srcW.Write(bulk)
	got := make([]byte, len(bulk))
	dstR.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(dstR, got); err != nil || !bytes.Equal(got, bulk) {
		t.Fatalf("bulk: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		b := make([]byte, 1<<20)
		stacks := string(b[:runtime.Stack(b, true)])
		if !strings.Contains(stacks, "splice.(*Pump)") && pipes(t) == before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the bulk went quiet: %d pipes (before %d), pump goroutine alive: %v",
				pipes(t), before, strings.Contains(stacks, "splice.(*Pump)"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := srcW.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	small := make([]byte, 4)
	if _, err := io.ReadFull(dstR, small); err != nil || string(small) != "more" {
		t.Fatalf("after parking: %q %v", small, err)
	}
	srcW.CloseWrite()
	if e := <-ends; e.err != nil || e.n != int64(len(bulk)+4) {
		t.Fatalf("done(%d, %v)", e.n, e.err)
	}
}
