package gateway

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

// TestRunRecordThroughSymlink: `rotor -healthcheck -config LINK/rotor.toml`
// (LINK a symlink to the directory) failed while the real path worked:
// the record's name and key came from the absolute path with the link
// left in. Both spellings of the file now find the same record.
func TestRunRecordThroughSymlink(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	base := t.TempDir()
	real := filepath.Join(base, "real")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	realPath, linkPath := filepath.Join(real, "rotor.toml"), filepath.Join(link, "rotor.toml")
	// The file names an admin address nothing listens on: only the record
	// leads to the running server.
	if err := os.WriteFile(realPath, []byte(strings.Replace(drainConf, `admin = "127.0.0.1:0"`, `admin = "127.0.0.1:1"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, started, asked string }{
		{"started by the real path, asked through the link", realPath, linkPath},
		{"started through the link, asked by the real path", linkPath, realPath},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if RunRecordPath(tt.started) != RunRecordPath(tt.asked) {
				t.Errorf("RunRecordPath(%s) != RunRecordPath(%s)", tt.started, tt.asked)
			}
			cfg, err := ParseConfig(tt.started, []byte(drainConf))
			if err != nil {
				t.Fatal(err)
			}
			srv, err := New(cfg, Options{Log: zerolog.Nop(), RunRecord: RunRecordPath(tt.started)})
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
			if err := Healthcheck(tt.asked); err != nil {
				t.Errorf("Healthcheck(%s): %v", tt.asked, err)
			}
		})
	}
	// A path that does not exist (yet) still has a key: the absolute path.
	missing := filepath.Join(base, "nowhere", "rotor.toml")
	if got := runRecordKey(missing); got != missing {
		t.Errorf("runRecordKey(%s) = %q, want the absolute path", missing, got)
	}
}
