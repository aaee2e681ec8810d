// Package splice copies between TCP connections without holding a pipe
// while a connection is idle. Copy (a goroutine per direction, waiting with
// MSG_PEEK) serves the load tool's upstream relay and rotor's fallback
// relay; Reactor and Pump (no goroutine while idle) serve rotor's tunnels.
package splice

import (
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// bulkHandoff is the queued-byte count from which a direction counts as
// bulk and is handed to plain io.Copy (splice with a held pipe) for the
// rest of its life.
const bulkHandoff = 16 << 10

// Copy copies src to dst with splice(2), like io.Copy, but never parks a
// pipe pair on an idle connection. io.Copy between two *net.TCPConn takes a
// pipe pair from Go's pool and keeps it while it blocks waiting for data,
// so an idle tunnel would cost 2 sockets + 4 pipe fds (measured with
// cmd/rotor-bench: rotor ran out of a 20,000 fd limit at ~3,300 idle
// tunnels). Here each round waits for readability with a MSG_PEEK recv
// (holding nothing), then splices exactly the queued bytes, which returns
// the pipe after the burst; an idle tunnel costs its 2 sockets. Once a
// burst of bulkHandoff bytes is queued the rest goes through io.Copy.
// Read deadlines on src apply as usual.
func Copy(dst, src *net.TCPConn) (int64, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return io.Copy(dst, src)
	}
	var total int64
	for {
		var avail int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			var b [1]byte
			n, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			switch {
			case e == unix.EAGAIN || e == unix.EINTR:
				return false // wait for readability, holding nothing
			case e != nil:
				rerr = e
			case n > 0:
				q, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
				if err != nil || q < 1 {
					q = 1
				}
				avail = q
			}
			return true // n == 0 is EOF: avail stays 0
		})
		if err == nil {
			err = rerr
		}
		if err != nil {
			return total, err
		}
		if avail == 0 {
			return total, nil
		}
		if avail >= bulkHandoff {
			n, err := io.Copy(dst, src)
			return total + n, err
		}
		n, err := io.CopyN(dst, src, int64(avail))
		total += n
		if err != nil {
			return total, err
		}
	}
}
