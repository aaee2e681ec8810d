package main

import (
	"errors"
	"net"
	"sync"
	"time"
)

// tcpServer is a tracked accept loop shared by the targets and the relay.
// Close stops accepting, closes every live connection and waits for every
// handler goroutine, so nothing a phase started outlives the run.
type tcpServer struct {
	ln     *net.TCPListener
	handle func(*net.TCPConn)
	wg     sync.WaitGroup

	// mu guards the fields below.
	mu     sync.Mutex
	conns  map[*net.TCPConn]struct{}
	closed bool
}

// listenTCP listens on addr (a loopback host:port) and serves each accepted
// connection with handle in its own goroutine. The goroutine is owned by the
// server: it ends when handle returns, which Close forces by closing the conn.
func listenTCP(addr string, handle func(*net.TCPConn)) (*tcpServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := &tcpServer{
		ln:     ln.(*net.TCPListener),
		handle: handle,
		conns:  make(map[*net.TCPConn]struct{}),
	}
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

// Addr is the bound listen address.
func (s *tcpServer) Addr() *net.TCPAddr { return s.ln.Addr().(*net.TCPAddr) }

func (s *tcpServer) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off and retry; Close ends the loop.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c)
			defer c.Close()
			s.handle(c)
		}()
	}
}

func (s *tcpServer) track(c *net.TCPConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *tcpServer) untrack(c *net.TCPConn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// Close stops the server and waits for every handler to return.
func (s *tcpServer) Close() {
	s.mu.Lock()
	s.closed = true
	live := make([]*net.TCPConn, 0, len(s.conns))
	for c := range s.conns {
		live = append(live, c)
	}
	s.mu.Unlock()
	s.ln.Close()
	for _, c := range live {
		c.Close()
	}
	s.wg.Wait()
}
