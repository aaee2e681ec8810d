package gateway

import (
	"bufio"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

// hostsPath is the hosts file selfTarget reads (a variable for tests).
var hostsPath = "/etc/hosts"

// localNames answers whether a target name is this machine by the names
// rotor can know without a network lookup: its hostname, and the names
// the hosts file gives a loopback, unspecified or local address. A proxy
// beside rotor resolves them so (squid, dante, tinyproxy read the same
// file), so "vm:9090" through it reached rotor's admin API, where
// selfTarget only knew "localhost" and addresses. Names only DNS maps to
// this machine are not seen: rotor does not resolve the names it sends
// upstream. The file is read again at most every localNamesTTL, and only
// for a target whose port is one of rotor's listeners.
type localNames struct {
	mu    sync.Mutex
	at    time.Time // last read (monotonic)
	mod   time.Time // the file's modification time then
	names map[string]bool
	host  string
}

const localNamesTTL = 10 * time.Second

func (l *localNames) local(name string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); l.names == nil || now.Sub(l.at) >= localNamesTTL {
		l.at = now
		if fi, err := os.Stat(hostsPath); err != nil || l.names == nil || !fi.ModTime().Equal(l.mod) {
			if err == nil {
				l.mod = fi.ModTime()
			}
			l.names = readLocalNames(hostsPath)
		}
		if h, err := os.Hostname(); err == nil {
			l.host = strings.TrimSuffix(strings.ToLower(h), ".")
		}
	}
	return name == l.host || l.names[name]
}

// readLocalNames returns the names the hosts file at path gives a
// loopback, unspecified or local address (lower case, no trailing dot).
func readLocalNames(path string) map[string]bool {
	names := map[string]bool{}
	f, err := os.Open(path)
	if err != nil {
		return names
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan() && n < 100000; n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		ip := net.ParseIP(strings.Split(fields[0], "%")[0])
		if ip == nil || !(ip.IsLoopback() || ip.IsUnspecified() || isLocalIP(ip)) {
			continue
		}
		for _, name := range fields[1:] {
			names[strings.TrimSuffix(strings.ToLower(name), ".")] = true
		}
	}
	return names
}
