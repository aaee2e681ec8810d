package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/PID/stat. It is
// 100 on every mainstream Linux build; the stdlib offers no sysconf.
const clockTicks = 100

// procCPU returns the user+system CPU time of every thread of pid, from
// /proc/PID/stat fields 14 and 15 (10 ms resolution).
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// comm (field 2) may contain spaces; fields restart after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state), so utime (14) is f[11] and stime (15) f[12].
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad times", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procRSS returns VmRSS of pid in KiB.
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// procFDs counts the open file descriptors of pid.
func procFDs(pid int) (int, error) {
	d, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	defer d.Close()
	n := 0
	for {
		names, err := d.Readdirnames(4096)
		n += len(names)
		if err != nil || len(names) == 0 {
			return n, nil
		}
	}
}

// procNofile returns the soft "Max open files" limit of pid (0: unlimited).
func procNofile(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(v)
			if len(f) == 0 || f[0] == "unlimited" {
				return 0, nil
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/limits: no Max open files", pid)
}

// wantNofile is the RLIMIT_NOFILE this tool and its relay ask for. A Go
// splice relay holds 6 fds per idle tunnel (2 sockets + a pipe pair per
// blocked direction), so 5,000 idle tunnels need about 30,000.
const wantNofile = 1 << 17

// raiseNofile lifts this process's RLIMIT_NOFILE to wantNofile when it may
// (CAP_SYS_RESOURCE raises the hard limit too), else the soft limit to the
// hard one, and returns the resulting soft limit.
func raiseNofile() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Max < wantNofile {
		up := syscall.Rlimit{Cur: wantNofile, Max: wantNofile}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			return wantNofile, nil
		}
	}
	if lim.Cur < lim.Max {
		lim.Cur = min(lim.Max, wantNofile)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	return lim.Cur, nil
}

// procSample is one reading of a process; a field is -1 when unreadable.
type procSample struct {
	CPU    time.Duration
	RSSKiB int64
	FDs    int
	ok     bool
}

// sampleProc reads CPU, RSS and fds of pid; pid 0 yields ok == false.
func sampleProc(pid int) procSample {
	if pid <= 0 {
		return procSample{RSSKiB: -1, FDs: -1}
	}
	cpu, err1 := procCPU(pid)
	rss, err2 := procRSS(pid)
	fds, err3 := procFDs(pid)
	if err1 != nil || err2 != nil || err3 != nil {
		return procSample{RSSKiB: -1, FDs: -1}
	}
	return procSample{CPU: cpu, RSSKiB: rss, FDs: fds, ok: true}
}

// fdKinds splits the open fds of pid into sockets, pipes and the rest, by
// readlink of /proc/PID/fd/N ("socket:[…]", "pipe:[…]"). Pipes matter: Go's
// io.Copy splice path holds a pipe pair per blocked direction.
type fdKinds struct {
	Sockets int `json:"sockets"`
	Pipes   int `json:"pipes"`
	Other   int `json:"other"`
}

func procFDKinds(pid int) (fdKinds, error) {
	var k fdKinds
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	d, err := os.Open(dir)
	if err != nil {
		return k, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return k, err
	}
	for _, n := range names {
		target, err := os.Readlink(dir + "/" + n)
		switch {
		case err != nil:
		case strings.HasPrefix(target, "socket:"):
			k.Sockets++
		case strings.HasPrefix(target, "pipe:"):
			k.Pipes++
		default:
			k.Other++
		}
	}
	return k, nil
}

// loadAvg returns the first three fields of /proc/loadavg, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
