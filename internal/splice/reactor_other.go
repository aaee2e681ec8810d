//go:build !linux

package splice

import (
	"errors"
	"net"
	"time"
)

// Reactor exists on Linux only; NewReactor fails elsewhere and callers
// keep a goroutine per direction.
type Reactor struct{}

// Pump is a Linux reactor pump.
type Pump struct{}

// LingerWait is the Linux pumps' wait before parking; unused elsewhere.
const LingerWait = 250 * time.Millisecond

// ErrNoReactor is returned off Linux.
var ErrNoReactor = errors.New("splice: no reactor on this platform")

// NewReactor fails off Linux.
func NewReactor() (*Reactor, error) { return nil, ErrNoReactor }

// Close does nothing.
func (r *Reactor) Close() error { return nil }

// Pump is never reached off Linux (NewReactor fails); it reports
// ErrNoReactor through done.
func (r *Reactor) Pump(dst, src *net.TCPConn, prefix []byte, onData func(), done func(int64, error)) *Pump {
	go done(0, ErrNoReactor)
	return &Pump{}
}

// Stop does nothing.
func (p *Pump) Stop() {}
