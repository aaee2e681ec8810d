package interop

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Credentials the suite's upstreams accept. danteUser is a system account
// (dante's username method checks the system password database).
const (
	upUser    = "rotorint"
	upPass    = "interop-Pw-7"
	danteUser = "rotorint"
	wrongPass = "wrong-password"
)

// Upstream kinds and the loopback address each one exits from.
var kinds = []struct {
	Kind, Scheme, ExitIP string
}{
	{"squid", "http", "127.0.0.2"},
	{"dante", "socks5", "127.0.0.3"},
	{"microsocks", "socks5", "127.0.0.4"},
	{"tinyproxy", "http", "127.0.0.5"},
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// upstreamSrv is one private instance of a real proxy server.
type upstreamSrv struct {
	Kind, Scheme, ExitIP string
	Addr                 string // 127.0.0.1:PORT it listens on
	User, Pass           string // what it accepts; "" = no auth
	dir                  string
	argv                 []string
	t                    *testing.T
	p                    *proc
}

// URL returns the upstream URL rotor is configured with, using pass as the
// password (so tests can configure a wrong one).
func (u *upstreamSrv) URL(pass string) string {
	if u.User == "" {
		return u.Scheme + "://" + u.Addr
	}
	return u.Scheme + "://" + url.UserPassword(u.User, pass).String() + "@" + u.Addr
}

// start (re)starts the server on its port and waits until it accepts.
func (u *upstreamSrv) start() {
	u.t.Helper()
	u.p = startProc(u.t, u.Kind, u.dir, u.argv...)
	waitAccept(u.t, u.p, u.Addr, 15*time.Second)
}

// stop stops the server gracefully and waits until its port refuses.
func (u *upstreamSrv) stop() {
	u.t.Helper()
	u.p.stop()
	waitRefused(u.t, u.Addr, 5*time.Second)
}

// kill stops the server with SIGKILL (a crash) and waits until its port refuses.
func (u *upstreamSrv) kill() {
	u.t.Helper()
	u.p.kill()
	waitRefused(u.t, u.Addr, 5*time.Second)
}

type srvOpts struct {
	NoAuth bool
}

// startUpstream starts a private instance of kind on a free loopback port.
func startUpstream(t *testing.T, kind string, o srvOpts) *upstreamSrv {
	t.Helper()
	var u *upstreamSrv
	for _, k := range kinds {
		if k.Kind == kind {
			u = &upstreamSrv{Kind: k.Kind, Scheme: k.Scheme, ExitIP: k.ExitIP, t: t}
		}
	}
	if u == nil {
		t.Fatalf("unknown upstream kind %q", kind)
	}
	if !o.NoAuth {
		u.User, u.Pass = upUser, upPass
	}
	port := freePort(t)
	u.Addr = hostPort(port)
	u.dir = privateDir(t, kind)
	switch kind {
	case "squid":
		u.argv = squidSetup(t, u, port)
	case "dante":
		u.argv = danteSetup(t, u, port)
	case "microsocks":
		bin := requireBin(t, "microsocks", "/usr/bin/microsocks")
		u.argv = []string{bin, "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-b", u.ExitIP}
		if u.User != "" {
			u.argv = append(u.argv, "-u", u.User, "-P", u.Pass)
		}
	case "tinyproxy":
		u.argv = tinyproxySetup(t, u, port)
	}
	u.start()
	return u
}

// privateDir makes a temp dir other users can read (squid's and tinyproxy's
// workers run unprivileged), removed when t ends.
func privateDir(t *testing.T, kind string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rotor-interop-"+kind+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func squidSetup(t *testing.T, u *upstreamSrv, port int) []string {
	t.Helper()
	requireRoot(t, "squid switches to cache_effective_user proxy")
	bin := requireBin(t, "squid", "/usr/sbin/squid")
	helper := requireBin(t, "squid basic_ncsa_auth", "/usr/lib/squid/basic_ncsa_auth")
	pw, err := user.Lookup("proxy")
	if err != nil {
		t.Fatalf("interop: component missing: system user proxy (squid package): %v", err)
	}
	uid, _ := strconv.Atoi(pw.Uid)
	gid, _ := strconv.Atoi(pw.Gid)

	var conf strings.Builder
	fmt.Fprintf(&conf, "http_port 127.0.0.1:%d\n", port)
	fmt.Fprintf(&conf, `visible_hostname rotor-interop
pid_filename %[1]s/squid.pid
cache_effective_user proxy
cache_effective_group proxy
pinger_enable off
shutdown_lifetime 0 seconds
cache deny all
cache_mem 8 MB
dns_nameservers 127.0.0.1
netdb_filename none
logfile_rotate 0
coredump_dir %[1]s
cache_log %[1]s/cache.log
access_log stdio:%[1]s/access.log
tcp_outgoing_address %[2]s
`, u.dir, u.ExitIP)
	if u.User != "" {
		// htpasswd -bc (apache2-utils), as the task's Debian setup installs it.
		htpasswd := requireBin(t, "htpasswd (apache2-utils)", "/usr/bin/htpasswd")
		pwFile := filepath.Join(u.dir, "passwd")
		if out, err := exec.Command(htpasswd, "-bc", pwFile, u.User, u.Pass).CombinedOutput(); err != nil {
			t.Fatalf("htpasswd: %v: %s", err, out)
		}
		fmt.Fprintf(&conf, `auth_param basic program %s %s
auth_param basic realm rotor-interop
auth_param basic children 2
acl authed proxy_auth REQUIRED
http_access allow authed
http_access deny all
`, helper, pwFile)
	} else {
		conf.WriteString("acl lo src 127.0.0.0/8\nhttp_access allow lo\nhttp_access deny all\n")
	}
	confPath := filepath.Join(u.dir, "squid.conf")
	writeFile(t, confPath, conf.String(), 0o644)
	chownTree(t, u.dir, uid, gid)
	// -N: no daemon, one process; -n: a service name of our own, so that
	// several private squids never share names.
	return []string{bin, "-N", "-f", confPath, "-n", fmt.Sprintf("rotorint%d", port)}
}

func chownTree(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

var danteUserOnce struct {
	sync.Once
	err error
}

// ensureDanteUser creates the system user dante authenticates (once, without
// a home directory) and sets its password.
func ensureDanteUser(t *testing.T) {
	t.Helper()
	danteUserOnce.Do(func() {
		if _, err := user.Lookup(danteUser); err != nil {
			out, err := exec.Command("useradd", "-M", "-s", "/usr/sbin/nologin", "-c", "rotor interop suite", danteUser).CombinedOutput()
			if err != nil {
				danteUserOnce.err = fmt.Errorf("useradd %s: %v: %s", danteUser, err, out)
				return
			}
		}
		cmd := exec.Command("chpasswd")
		cmd.Stdin = strings.NewReader(danteUser + ":" + upPass + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			danteUserOnce.err = fmt.Errorf("chpasswd %s: %v: %s", danteUser, err, out)
		}
	})
	if danteUserOnce.err != nil {
		t.Fatalf("interop: dante's system user: %v", danteUserOnce.err)
	}
}

func danteSetup(t *testing.T, u *upstreamSrv, port int) []string {
	t.Helper()
	requireRoot(t, "dante checks the system password database")
	bin := requireBin(t, "danted (dante-server)", "/usr/sbin/danted")
	method := "none"
	if u.User != "" {
		ensureDanteUser(t)
		u.User = danteUser
		method = "username"
	}
	conf := fmt.Sprintf(`logoutput: stderr
internal: 127.0.0.1 port = %d
external: %s
clientmethod: none
socksmethod: %s
user.privileged: root
user.unprivileged: nobody
client pass {
	from: 127.0.0.0/8 to: 0.0.0.0/0
	log: error
}
socks pass {
	from: 127.0.0.0/8 to: 0.0.0.0/0
	command: connect
	log: error
}
`, port, u.ExitIP, method)
	confPath := filepath.Join(u.dir, "danted.conf")
	writeFile(t, confPath, conf, 0o644)
	return []string{bin, "-f", confPath, "-p", filepath.Join(u.dir, "danted.pid")}
}

func tinyproxySetup(t *testing.T, u *upstreamSrv, port int) []string {
	t.Helper()
	bin := requireBin(t, "tinyproxy", "/usr/bin/tinyproxy")
	var conf strings.Builder
	if os.Geteuid() == 0 {
		conf.WriteString("User nobody\nGroup nogroup\n")
	}
	fmt.Fprintf(&conf, `Port %d
Listen 127.0.0.1
Bind %s
Timeout 60
MaxClients 100
LogLevel Info
`, port, u.ExitIP)
	if u.User != "" {
		fmt.Fprintf(&conf, "BasicAuth %s %s\n", u.User, u.Pass)
	}
	confPath := filepath.Join(u.dir, "tinyproxy.conf")
	writeFile(t, confPath, conf.String(), 0o644)
	return []string{bin, "-d", "-c", confPath}
}
