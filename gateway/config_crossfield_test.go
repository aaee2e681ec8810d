package gateway

import (
	"strings"
	"testing"
)

// TestConfigNoCrossCheckAgainstADefault: base = "2x" was reported, and
// then "max must be >= base (max 4s, base 30s)" too, comparing the max
// with the default base that stood in for the bad value. A check that
// reads a field whose value was refused is left out; the same check with
// valid values still runs.
func TestConfigNoCrossCheckAgainstADefault(t *testing.T) {
	up := "\n[[upstream]]\nurl = \"direct://\"\n"
	tests := []struct {
		name, text string
		want       []string // every error, in order
	}{
		{"bad base", "[cooldown.refused]\nbase = \"2x\"\nmax = \"4s\"\n" + up,
			[]string{`c.toml:2: cooldown.refused.base: invalid duration "2x"`}},
		{"bad after", "[cooldown.timeout]\nafter = \"x\"\npermanent_after = 1\n" + up,
			[]string{`c.toml:2: cooldown.timeout.after: want an integer, got a string`}},
		{"bad base in another class", "[cooldown.refused]\nbase = \"2x\"\n[cooldown.timeout]\nbase = \"1m\"\nmax = \"2s\"\n" + up,
			[]string{`c.toml:2: cooldown.refused.base: invalid duration "2x"`, "c.toml:5: cooldown.timeout.max: must be >= base (max 2s, base 1m0s)"}},
		{"valid values still checked", "[cooldown.refused]\nbase = \"10s\"\nmax = \"4s\"\n" + up,
			[]string{"c.toml:3: cooldown.refused.max: must be >= base (max 4s, base 10s)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseConfig("c.toml", []byte(tt.text))
			if err == nil {
				t.Fatalf("accepted, want %q", tt.want)
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tt.want) {
				t.Fatalf("errors:\n%s\nwant %d: %q", err, len(tt.want), tt.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tt.want[i]) {
					t.Errorf("error %d = %q, want %q…", i, got[i], tt.want[i])
				}
			}
		})
	}
}
