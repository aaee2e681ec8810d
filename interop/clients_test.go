package interop

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Fronts of rotor, as the clients see them.
const (
	frontSOCKS   = "socks5"  // SOCKS5 CONNECT
	frontConnect = "connect" // HTTP CONNECT tunnel
	frontHTTP    = "http"    // plain HTTP forwarding (absolute-URI GET)
)

// realClient drives one real client program through a proxy.
type realClient struct {
	Name  string
	Front string
	// Auth reports whether the client can send proxy credentials.
	Auth bool
	// Fetch loads targetURL through the proxy at addr and returns what the
	// client printed (the body or DOM).
	Fetch func(t *testing.T, addr, user, pass, targetURL string) (string, error)
}

// noProxyEnv keeps proxy variables of the environment out of the clients.
var noProxyEnv = []string{"http_proxy=", "https_proxy=", "HTTP_PROXY=", "HTTPS_PROXY=",
	"ALL_PROXY=", "all_proxy=", "NO_PROXY=", "no_proxy="}

func curlFetch(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := requireBin(t, "curl", "/usr/bin/curl")
	argv := append([]string{bin, "-sS", "--max-time", "20", "--noproxy", ""}, args...)
	out, errOut, err := run(t, 30*time.Second, noProxyEnv, argv...)
	if err != nil {
		return out, fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut))
	}
	return out, nil
}

func userArg(user, pass string) []string {
	if user == "" {
		return nil
	}
	return []string{"--proxy-user", user + ":" + pass}
}

// nodeDir returns interop/node with its npm packages installed.
func nodeDir(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "interop", "node")
	for _, pkg := range []string{"socks-proxy-agent", "https-proxy-agent"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", pkg)); err != nil {
			t.Fatalf("interop: component missing: npm package %s in %s (run .ci/interop-deps.sh)", pkg, dir)
		}
	}
	return dir
}

func nodeFetch(t *testing.T, mode, proxyURL, targetURL string) (string, error) {
	t.Helper()
	node := requireBin(t, "node (nodejs)", "/usr/bin/node")
	dir := nodeDir(t)
	out, errOut, err := run(t, 30*time.Second, noProxyEnv, node, filepath.Join(dir, "client.js"), mode, proxyURL, targetURL)
	if err != nil {
		return out, fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut))
	}
	return out, nil
}

func proxyURL(scheme, addr, user, pass string) string {
	if user == "" {
		return scheme + "://" + addr
	}
	return scheme + "://" + user + ":" + pass + "@" + addr
}

func chromiumFetch(t *testing.T, proxy, targetURL string) (string, error) {
	t.Helper()
	bin := requireBin(t, "chromium", "/usr/bin/chromium")
	dir := t.TempDir()
	out, errOut, err := run(t, 60*time.Second, append(noProxyEnv, "HOME="+dir),
		bin, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--no-default-browser-check", "--user-data-dir="+dir,
		"--proxy-server="+proxy,
		// Chromium bypasses proxies for loopback targets unless told not
		// to (<-loopback>). Even with background networking disabled it
		// still asks for clients2.google.com, update.googleapis.com and
		// accounts.google.com through the proxy; those would leave the box
		// (the upstream resolves them) and fail in ways that cool the
		// upstream. Send them direct instead, where the resolver rules
		// fail them locally.
		"--proxy-bypass-list=<-loopback>;"+chromiumBypass,
		"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
		"--dump-dom", targetURL)
	if err != nil {
		return out, fmt.Errorf("%v: %s", err, lastLines(errOut, 8))
	}
	return out, nil
}

// chromiumBypass lists the hosts Chromium contacts on its own.
const chromiumBypass = "*.google.com;*.googleapis.com;*.gvt1.com;*.gstatic.com;*.googleusercontent.com;*.doubleclick.net"

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clients is every real client the suite drives, by front.
var clients = []realClient{
	{Name: "curl", Front: frontSOCKS, Auth: true,
		Fetch: func(t *testing.T, addr, user, pass, u string) (string, error) {
			return curlFetch(t, append([]string{"--socks5-hostname", addr}, append(userArg(user, pass), u)...)...)
		}},
	{Name: "proxychains4-curl", Front: frontSOCKS, Auth: true,
		Fetch: func(t *testing.T, addr, user, pass, u string) (string, error) {
			t.Helper()
			pc := requireBin(t, "proxychains4", "/usr/bin/proxychains4")
			curl := requireBin(t, "curl", "/usr/bin/curl")
			host, port, _ := strings.Cut(addr, ":")
			conf := filepath.Join(t.TempDir(), "proxychains.conf")
			line := fmt.Sprintf("socks5 %s %s", host, port)
			if user != "" {
				line += " " + user + " " + pass
			}
			writeFile(t, conf, "strict_chain\nquiet_mode\ntcp_read_time_out 15000\ntcp_connect_time_out 8000\n[ProxyList]\n"+line+"\n", 0o644)
			out, errOut, err := run(t, 30*time.Second, noProxyEnv, pc, "-q", "-f", conf, curl, "-sS", "--max-time", "20", "--noproxy", "", u)
			if err != nil {
				return out, fmt.Errorf("%v: %s", err, strings.TrimSpace(errOut))
			}
			return out, nil
		}},
	{Name: "chromium", Front: frontSOCKS,
		Fetch: func(t *testing.T, addr, _, _, u string) (string, error) {
			return chromiumFetch(t, "socks5://"+addr, u)
		}},
	{Name: "node-socks-proxy-agent", Front: frontSOCKS, Auth: true,
		Fetch: func(t *testing.T, addr, user, pass, u string) (string, error) {
			return nodeFetch(t, "socks", proxyURL("socks5h", addr, user, pass), u)
		}},
	{Name: "curl", Front: frontConnect, Auth: true,
		Fetch: func(t *testing.T, addr, user, pass, u string) (string, error) {
			return curlFetch(t, append([]string{"-p", "-x", "http://" + addr}, append(userArg(user, pass), u)...)...)
		}},
	{Name: "node-https-proxy-agent", Front: frontConnect, Auth: true,
		Fetch: func(t *testing.T, addr, user, pass, u string) (string, error) {
			return nodeFetch(t, "connect", proxyURL("http", addr, user, pass), u)
		}},
	{Name: "curl", Front: frontHTTP, Auth: true,
		Fetch: func(t *testing.T, addr, user, pass, u string) (string, error) {
			return curlFetch(t, append([]string{"-x", "http://" + addr}, append(userArg(user, pass), u)...)...)
		}},
	{Name: "chromium", Front: frontHTTP,
		Fetch: func(t *testing.T, addr, _, _, u string) (string, error) {
			return chromiumFetch(t, "http://"+addr, u)
		}},
}

// checkFetch runs c through addr and checks that the target answered it
// from exit (the upstream's exit address) with the page.
func checkFetch(t *testing.T, c realClient, tg *target, addr, user, pass, exit string) {
	t.Helper()
	path := "/page-" + strings.NewReplacer("/", "-", "=", "-").Replace(t.Name())
	before := tg.count(exit, path)
	out, err := c.Fetch(t, addr, user, pass, tg.URL+path)
	if err != nil {
		t.Fatalf("%s via %s front at %s: %v\noutput: %s", c.Name, c.Front, addr, err, lastLines(out, 5))
	}
	if !strings.Contains(out, okBody(exit)) {
		t.Errorf("%s: output does not name exit %s: %q (target counts %s)", c.Name, exit, lastLines(out, 5), tg.counts())
	}
	if got := tg.count(exit, path); got <= before {
		t.Errorf("%s: target saw no request from %s for %s (counts %s)", c.Name, exit, path, tg.counts())
	}
}
