package gateway

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/rotor-proxy/rotor/upstream/upstreamtest"
)

// configMap lays out dir as a Kubernetes ConfigMap volume does: each key
// is a symlink through ..data, itself a symlink to a versioned directory.
type configMap struct {
	t   *testing.T
	dir string
	n   int
}

func newConfigMap(t *testing.T, dir string, files map[string]string) *configMap {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cm := &configMap{t: t, dir: dir}
	cm.update(files)
	for name := range files {
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return cm
}

// update writes files into a new version directory and swaps ..data to
// it as the kubelet does: ln -s vN ..data_tmp && mv -T ..data_tmp ..data.
func (cm *configMap) update(files map[string]string) {
	cm.t.Helper()
	cm.n++
	v := fmt.Sprintf("..v%d", cm.n)
	if err := os.Mkdir(filepath.Join(cm.dir, v), 0o755); err != nil {
		cm.t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(cm.dir, v, name), []byte(text), 0o600); err != nil {
			cm.t.Fatal(err)
		}
	}
	tmp := filepath.Join(cm.dir, "..data_tmp")
	if err := os.Symlink(v, tmp); err != nil {
		cm.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(cm.dir, "..data")); err != nil {
		cm.t.Fatal(err)
	}
}

// TestWatchConfigMapSwap: a ConfigMap update swaps ..data and touches no
// watched name; it was not seen (only SIGHUP reloaded). Both the config
// file's ConfigMap and a list file's (another mount) are watched.
func TestWatchConfigMapSwap(t *testing.T) {
	a := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	b := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	c := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	root := t.TempDir()
	conf := func(names ...string) map[string]string {
		text := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[pool]\nstart_eligible = true\n" +
			"[[upstream_file]]\npath = \"../lists/proxies.txt\"\nscheme = \"socks5\"\n"
		for _, n := range names {
			text += fmt.Sprintf("[[upstream]]\nurl = \"socks5://%s\"\nname = %q\n", map[string]string{"a": a.Addr(), "b": b.Addr()}[n], n)
		}
		return map[string]string{"rotor.toml": text}
	}
	etc := newConfigMap(t, filepath.Join(root, "etc"), conf("a"))
	lists := newConfigMap(t, filepath.Join(root, "lists"), map[string]string{"proxies.txt": "# none yet\n"})

	srv, logs, hup := watchedFile(t, filepath.Join(etc.dir, "rotor.toml"), false)
	// Watch handles SIGHUP once it watches the files: a change made
	// before then would be the start-up's, not a swap's.
	hup <- os.Interrupt
	eventuallyTrue(t, "Watch running", func() bool { return strings.Contains(logs.String(), `"reason":"SIGHUP"`) })
	// Unrelated churn first: the swaps below must still be seen.
	if err := os.WriteFile(filepath.Join(etc.dir, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	etc.update(conf("a", "b"))
	eventuallyTrue(t, "b added by the config's ConfigMap swap", func() bool { return srv.Pool().Lookup("b") != nil })

	lists.update(map[string]string{"proxies.txt": c.Addr() + "\n"})
	eventuallyTrue(t, "c added by the list's ConfigMap swap", func() bool { return srv.Pool().Lookup(c.Addr()) != nil })
	// One reload per swap, each naming the file it is for (the list's
	// was "config file changed" too): the version directories' own churn
	// reloads nothing more.
	var reasons []string
	for _, l := range linesWith(t, logs, "reloading") {
		reasons = append(reasons, fmt.Sprint(l["reason"], " ", l["file"]))
	}
	want := []string{"SIGHUP <nil>", "config file changed " + filepath.Join(etc.dir, "rotor.toml"),
		"upstream list file changed " + filepath.Join(lists.dir, "proxies.txt")}
	if fmt.Sprint(reasons) != fmt.Sprint(want) {
		t.Errorf("reloads %q, want %q: %s", reasons, want, logs.String())
	}
}

// TestWatchSetChanged: what makes Watch reload after an event that names
// no watched file, and what does not.
func TestWatchSetChanged(t *testing.T) {
	write := func(t *testing.T, p, text string) {
		t.Helper()
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, dir, file string)
		want bool
	}{
		{"nothing", func(t *testing.T, dir, file string) {}, false},
		{"another file created", func(t *testing.T, dir, file string) { write(t, filepath.Join(dir, "notes.txt"), "x") }, false},
		{"another symlink swapped", func(t *testing.T, dir, file string) {
			if err := os.Symlink("..v1", filepath.Join(dir, "..other")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "..other"), filepath.Join(dir, "..unrelated")); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"a file in the version directory created", func(t *testing.T, dir, file string) {
			write(t, filepath.Join(dir, "..v1", "other.toml"), "x")
		}, false},
		{"ConfigMap swap", func(t *testing.T, dir, file string) {
			if err := os.Mkdir(filepath.Join(dir, "..v2"), 0o755); err != nil {
				t.Fatal(err)
			}
			write(t, filepath.Join(dir, "..v2", "rotor.toml"), "a = 1\n")
			if err := os.Symlink("..v2", filepath.Join(dir, "..data_tmp")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"in-place write", func(t *testing.T, dir, file string) { write(t, file, "a = 22\n") }, true},
		{"write and rename over", func(t *testing.T, dir, file string) {
			write(t, filepath.Join(dir, "..v1", "rotor.toml.tmp"), "a = 1\n")
			if err := os.Rename(filepath.Join(dir, "..v1", "rotor.toml.tmp"), filepath.Join(dir, "..v1", "rotor.toml")); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"deleted", func(t *testing.T, dir, file string) {
			if err := os.Remove(filepath.Join(dir, "..v1", "rotor.toml")); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			newConfigMap(t, dir, map[string]string{"rotor.toml": "a = 1\n"})
			file := filepath.Join(dir, "rotor.toml")
			var ws watchSet
			dirs := ws.set(map[string]bool{file: true})
			if !dirs[dir] || !dirs[filepath.Join(dir, "..v1")] || len(dirs) != 2 {
				t.Errorf("directories to watch: %v, want %s and its ..v1", dirs, dir)
			}
			tc.do(t, dir, file)
			if got := ws.changed(); (len(got) > 0) != tc.want || len(got) > 0 && (len(got) != 1 || got[0] != file) {
				t.Errorf("changed() = %v, want %v (%s)", got, tc.want, file)
			}
			if got := ws.changed(); len(got) > 0 {
				t.Errorf("changed() again with nothing new: %v", got)
			}
		})
	}
}

// TestWatchSIGHUPOnDefaults: with no config file a SIGHUP logged
// "reloading" and then nothing; it now says there is nothing to reload.
func TestWatchSIGHUPOnDefaults(t *testing.T) {
	logs := &logBuffer{}
	srv, err := New(Defaults(), Options{Log: zerolog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	hup := watch(t, srv)
	hup <- os.Interrupt
	eventuallyTrue(t, "the SIGHUP answered", func() bool {
		return strings.Contains(logs.String(), `"level":"info","reason":"SIGHUP","message":"nothing to reload: running on built-in defaults (no config file)"`)
	})
	if strings.Contains(logs.String(), `"message":"reloading"`) {
		t.Errorf("a SIGHUP on built-in defaults claimed to reload: %s", logs.String())
	}
}

// TestWatchListFileWriteSaysSo: an in-place write of an [[upstream_file]]
// list reloads with reason "upstream list file changed" and the list's
// path (it said "config file changed", naming no file); a write of the
// config file still says "config file changed", with its path.
func TestWatchListFileWriteSaysSo(t *testing.T) {
	a := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	b := upstreamtest.NewSOCKS5(t, upstreamtest.Options{})
	dir := t.TempDir()
	conf := filepath.Join(dir, "rotor.toml")
	list := filepath.Join(dir, "proxies.txt")
	text := "[listen]\nsocks5 = \"127.0.0.1:0\"\nhttp = \"\"\nadmin = \"\"\n[pool]\nstart_eligible = true\n" +
		"[[upstream_file]]\npath = \"proxies.txt\"\nscheme = \"socks5\"\n"
	for p, s := range map[string]string{conf: text, list: a.Addr() + "\n"} {
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	srv, logs, hup := watchedFile(t, conf, false)
	hup <- os.Interrupt
	eventuallyTrue(t, "Watch running", func() bool { return strings.Contains(logs.String(), `"reason":"SIGHUP"`) })

	if err := os.WriteFile(list, []byte(a.Addr()+"\n"+b.Addr()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	eventuallyTrue(t, "b added by the list's write", func() bool { return srv.Pool().Lookup(b.Addr()) != nil })
	if err := os.WriteFile(conf, []byte(text+"# edited\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The list's write may raise a second event after its reload, which
	// the watcher then takes with the config's write ("config file and
	// upstream list file changed"): wait for the reload naming the config.
	var reasons []string
	eventuallyTrue(t, "the config's reload", func() bool {
		reasons = reasons[:0]
		for _, l := range linesWith(t, logs, "reloading") {
			reasons = append(reasons, fmt.Sprintf("%v %v %v", l["reason"], l["file"], l["files"]))
		}
		return len(reasons) >= 3 && strings.HasPrefix(reasons[len(reasons)-1], "config file")
	})
	if reasons[0] != "SIGHUP <nil> <nil>" || !slices.Contains(reasons, "upstream list file changed "+list+" <nil>") {
		t.Errorf("reloads %q, want SIGHUP, then the list's: %s", reasons, logs.String())
	}
	if last := reasons[len(reasons)-1]; !strings.Contains(last, conf) {
		t.Errorf("last reload %q, want the config file's (%s)", last, conf)
	}
	for _, r := range reasons[1 : len(reasons)-1] {
		if !strings.HasPrefix(r, "upstream list file changed ") {
			t.Errorf("reload %q between the list's write and the config's", r)
		}
	}
}
