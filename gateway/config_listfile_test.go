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

// TestCheckListDuplicateNamesKeptCopy: a list line that duplicates an
// [[upstream]] the config has twice names the first, kept one (bug: it
// named the second, which the config rejects as a duplicate), and says
// which copy is kept and which is skipped.
func TestCheckListDuplicateNamesKeptCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rotor.toml")
	list := filepath.Join(dir, "list.txt")
	writeFiles(t, dir, map[string]string{
		"rotor.toml": "[[upstream]]\nurl = \"http://127.0.0.1:3128\"\n[[upstream]]\nurl = \"http://127.0.0.1:3128\"\n[[upstream_file]]\npath = \"list.txt\"\n",
		"list.txt":   "127.0.0.1:4000\n127.0.0.1:3128\n127.0.0.1:4000\n",
	})
	want := path + ":4: upstream http://127.0.0.1:3128 duplicates the one at line 2\n" +
		list + ":2: upstream http://127.0.0.1:3128 duplicates the one at " + path + ":2 (that one is kept; this line is skipped)\n" +
		list + ":3: upstream http://127.0.0.1:4000 duplicates the one at line 1 (that one is kept; this line is skipped)"
	if err := CheckConfig(path); err == nil || err.Error() != want {
		t.Errorf("err = %v\nwant %s", err, want)
	}
}
