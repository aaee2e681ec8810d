package gateway

import (
	"os"
	"strings"
	"testing"
)

// TestStateDirErrorReadOnlyDir: a directory that takes no new file is
// found by trying, as each write does, so that it is found as the writer
// meets it whoever runs rotor: sysfs takes no file from anyone, root
// included (the mode bits TestCheckStateFileNoWritePermission uses do
// not stop root).
func TestStateDirErrorReadOnlyDir(t *testing.T) {
	if f, err := os.CreateTemp("/sys", ".rotor-test-*"); err == nil {
		f.Close()
		os.Remove(f.Name())
		t.Skip("/sys takes new files here; this test needs a directory that does not")
	} else if info, err := os.Stat("/sys"); err != nil || !info.IsDir() {
		t.Skipf("no /sys directory here: %v", err)
	}
	for _, tt := range []struct{ path, want string }{
		{"/sys/rotor-state.json", "cannot create a file in directory /sys: "},
		{"/sys/rotor-test/state.json", "directory /sys/rotor-test does not exist and cannot be made in /sys: "},
	} {
		if err := stateDirError(tt.path); err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("stateDirError(%s) = %v, want %s…", tt.path, err, tt.want)
		}
	}
}
