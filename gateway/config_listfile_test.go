package gateway

import (
	"path/filepath"
	"testing"
)

// TestCheckListPathWrongType: an [[upstream_file]] path of the wrong type
// (or empty) is one error, at its line (bug: a second, bogus one followed,
// "upstream_file: . is a directory, not a list file": the path left at ""
// was read as the config file's directory).
func TestCheckListPathWrongType(t *testing.T) {
	for name, tc := range map[string]struct{ value, want string }{
		"integer": {"5", "upstream_file.path: want a string, got an integer"},
		"empty":   {`""`, "upstream_file: path is required"},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "rotor.toml")
			writeFiles(t, dir, map[string]string{"rotor.toml": "[[upstream]]\nurl = \"direct://\"\n[[upstream_file]]\npath = " + tc.value + "\n"})
			err := CheckConfig(path)
			if want := path + ":4: " + tc.want; err == nil || err.Error() != want {
				t.Errorf("err = %v\nwant %s", err, want)
			}
		})
	}
}
