package splice

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// tcpPair returns the two ends of one loopback TCP connection.
func tcpPair(t *testing.T) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() { c, _ := ln.Accept(); acc <- c }()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-acc
	t.Cleanup(func() { a.Close(); b.Close() })
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// TestCopy moves small bursts (peek-and-splice rounds) then a bulk transfer
// (handed to io.Copy) from one connection to another and checks every byte
// arrives in order and EOF ends the copy.
func TestCopy(t *testing.T) {
	srcW, src := tcpPair(t)
	dst, dstR := tcpPair(t)
	want := &bytes.Buffer{}
	done := make(chan error, 1)
	var n int64
	go func() {
		var err error
		n, err = Copy(dst, src)
		dst.CloseWrite()
		done <- err
	}()
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(dstR); got <- b }()
	for i := 0; i < 50; i++ {
		chunk := bytes.Repeat([]byte{byte(i)}, 100+i)
		want.Write(chunk)
		if _, err := srcW.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	bulk := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	want.Write(bulk)
	if _, err := srcW.Write(bulk); err != nil {
		t.Fatal(err)
	}
	srcW.CloseWrite()
	if err := <-done; err != nil {
		t.Fatalf("Copy: %v", err)
	}
	b := <-got
	if !bytes.Equal(b, want.Bytes()) || n != int64(want.Len()) {
		t.Fatalf("copied %d bytes (returned %d), want %d identical bytes", len(b), n, want.Len())
	}
}
