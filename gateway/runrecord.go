package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// runRecord is what a running rotor writes for `rotor -healthcheck`: the
// address its admin listener is bound to. The healthcheck then asks the
// running process, not whatever the config file says now: a file edited
// since (invalid, or with a listen.admin that needs a restart) must not
// make a healthy rotor look dead. It holds no secret: /healthz needs no
// token.
type runRecord struct {
	PID    int    `json:"pid"`
	Config string `json:"config"` // runRecordKey: the resolved absolute path, or "built-in defaults"
	Admin  string `json:"admin"`
}

// RunRecordPath is where the rotor running from configPath ("" for the
// built-in defaults) records its admin address: in $XDG_RUNTIME_DIR, else
// the temporary directory, under a name derived from the config's absolute
// path with symlinks resolved (runRecordKey), so that several rotors on one host keep apart and
// `rotor -healthcheck -config FILE` finds the one running FILE.
func RunRecordPath(configPath string) string {
	sum := sha256.Sum256([]byte(runRecordKey(configPath)))
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "rotor-"+hex.EncodeToString(sum[:8])+".json")
}

// runRecordKey names the config file the same whichever way it is
// spelled: absolute, with symlinks resolved, so that `-healthcheck -config
// LINK/rotor.toml` finds the rotor started as REAL/rotor.toml and back. A
// path that cannot be resolved (the file gone) keeps its absolute form.
func runRecordKey(configPath string) string {
	if configPath == "" {
		return "built-in defaults"
	}
	a := absPath(configPath)
	if r, err := filepath.EvalSymlinks(a); err == nil {
		return r
	}
	return a
}

// Healthcheck asks the admin listener of the rotor running from
// configPath ("" for the built-in defaults) for /healthz, and returns nil
// when it answers 200. The address is the one that rotor recorded at Start
// (RunRecordPath), so an edit of the config file since (invalid, or a
// listen.admin that needs a restart) does not make a healthy rotor look
// dead; without a record from a live process (none started, or it could
// not write one) it is listen.admin from the file. /healthz needs no token.
func Healthcheck(configPath string) error {
	addr, ok := recordedAdmin(configPath)
	if !ok {
		cfg := Defaults()
		if configPath != "" {
			var err error
			if cfg, err = LoadConfig(configPath); err != nil {
				return err
			}
		}
		addr = cfg.Listen.Admin
	}
	if addr == "" {
		return errors.New("no admin listener to ask (listen.admin is empty)")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	c := http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get("http://" + net.JoinHostPort(host, port) + "/healthz")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/healthz answered %s", resp.Status)
	}
	return nil
}

// recordedAdmin returns the admin address recorded by the rotor running
// from configPath, or false when there is no record or the process that
// wrote it is gone.
func recordedAdmin(configPath string) (string, bool) {
	data, err := os.ReadFile(RunRecordPath(configPath))
	if err != nil {
		return "", false
	}
	var rec runRecord
	if json.Unmarshal(data, &rec) != nil || rec.Admin == "" || rec.Config != runRecordKey(configPath) || !processAlive(rec.PID) {
		return "", false
	}
	return rec.Admin, true
}

// processAlive reports whether pid names a running process. A process of
// another user (EPERM) is running too.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	defer p.Release()
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// writeRunRecord writes Options.RunRecord once the admin listener is bound.
// A failure (no writable runtime directory, as under a read-only root
// filesystem) only costs the healthcheck its independence from the config
// file, so it is a warning.
func (s *Server) writeRunRecord() {
	admin := s.Addr("admin")
	if s.runRecord == "" || admin == "" {
		return
	}
	rec, _ := json.Marshal(runRecord{PID: os.Getpid(), Config: runRecordKey(s.cfg.Load().Path()), Admin: admin})
	if err := writeFileAtomic(s.runRecord, append(rec, '\n'), 0o644); err != nil {
		s.log.Warn().Err(err).Str("path", s.runRecord).Msg("admin address not recorded: rotor -healthcheck reads listen.admin from the config file")
	}
}

// removeRunRecord removes the record at shutdown, unless another rotor has
// written its own there since.
func (s *Server) removeRunRecord() {
	if s.runRecord == "" {
		return
	}
	data, err := os.ReadFile(s.runRecord)
	if err != nil {
		return
	}
	var rec runRecord
	if json.Unmarshal(data, &rec) == nil && rec.PID == os.Getpid() && rec.Admin == s.Addr("admin") {
		_ = os.Remove(s.runRecord)
	}
}
