package gateway

import (
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// TestStateFileWriteRetried runs the writer in a synctest bubble: a write
// that fails (the state file's directory replaced by a regular file: mode
// bits do not stop root) is retried soon, with a backoff, without waiting
// for another transition or the minute's flush, and is logged once
// however many retries meet the same error; once the directory is back
// the next retry writes the file and says so. The failed write was only
// tried again at the next transition or flush: a minute of records could
// be lost to a moment's failure.
func TestStateFileWriteRetried(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		srv, logs := newStateServer(t, stateConfig(dir), nil)
		path := srv.cfg.Load().StateFile
		stateDir := filepath.Dir(path)
		if err := os.MkdirAll(stateDir, 0o755); err != nil {
			t.Fatal(err)
		}
		srv.startStateFile()
		t.Cleanup(srv.stopStateFile)

		// The directory goes away and a file takes its place.
		if err := os.Rename(stateDir, stateDir+".away"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(stateDir, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		srv.tr.Disable(srv.pool.Lookup("dc-1").Record(), "x")
		// The write at 1 s fails, and so do its retries at 2 s and 4 s.
		time.Sleep(stateDebounce + 5*time.Second)
		synctest.Wait()
		got := stateLines(t, logs.String())
		if len(got) != 1 || got[0].Message != "state file not written" {
			t.Fatalf("state file lines %+v, want one error line for the failing writes; log:\n%s", got, logs)
		}

		// The directory is back; no transition follows.
		if err := os.Remove(stateDir); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(stateDir+".away", stateDir); err != nil {
			t.Fatal(err)
		}
		// The retry at 8 s writes it, well before the flush at 60 s.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("state file not written by the retry after the directory's return: %v", err)
		}
		if doc := readStateDoc(t, path); len(doc.Records) != 2 || doc.Records[0].State != health.Disabled {
			t.Errorf("state file after the retry: %+v", doc.Records)
		}
		got = stateLines(t, logs.String())
		if len(got) != 2 || got[1].Message != "state file written again" {
			t.Errorf("state file lines %+v, want the error then one line saying it is written again; log:\n%s", got, logs)
		}
	})
}

// TestStateRetryDelay: the delay before retrying a failed write doubles
// from stateRetryMin up to stateRetryMax.
func TestStateRetryDelay(t *testing.T) {
	var got []time.Duration
	d := time.Duration(0)
	for range 9 {
		d = stateRetryDelay(d)
		got = append(got, d)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, time.Minute, time.Minute, time.Minute}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("retry delays %v, want %v", got, want)
		}
	}
}
