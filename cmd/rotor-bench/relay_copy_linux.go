package main

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// fionread is the Linux FIONREAD/SIOCINQ ioctl: bytes queued for reading.
const fionread = 0x541B

// bulkHandoff is the queued-byte count from which a direction is treated as
// bulk and handed to plain io.Copy for the rest of its life, so bulk
// figures (and the relay's CPU per GiB) are exactly those of io.Copy.
const bulkHandoff = 16 << 10

// copyIdleAware copies src to dst with splice(2), like io.Copy, but never
// parks a pipe pair on an idle connection. io.Copy between two
// *net.TCPConn takes a pipe pair from Go's pool and keeps it while it
// blocks waiting for data, so an idle tunnel costs 2 sockets + 4 pipe fds
// and the pipes stay pooled until a GC. Here each round first waits for
// readability with a MSG_PEEK recv (no pipe held), then splices exactly the
// queued bytes with io.CopyN, which returns the pipe after the burst. An
// idle tunnel then costs 2 fds, and this relay, not the gateway, never
// runs out of descriptors first. Once a burst of bulkHandoff bytes is
// queued, the direction is bulk and the rest goes through io.Copy.
func copyIdleAware(dst, src *net.TCPConn) (int64, error) {
	rc, err := src.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		var avail int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			var b [1]byte
			n, _, e := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			switch {
			case e == syscall.EAGAIN || e == syscall.EINTR:
				return false // wait for readability, holding nothing
			case e != nil:
				rerr = e
			case n > 0:
				var q int32
				if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, fionread, uintptr(unsafe.Pointer(&q))); e != 0 || q < 1 {
					q = 1
				}
				avail = int(q)
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
