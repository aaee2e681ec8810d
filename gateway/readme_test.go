package gateway

import (
	"os"
	"regexp"
	"testing"

	"github.com/rs/zerolog"
)

// TestREADMELogFieldNames: the README quoted the session log line as
// "msg":"session moved"; zerolog writes the message under "message". A
// JSON log line quoted in the README names the fields rotor writes.
func TestREADMELogFieldNames(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// zerolog's field names are set process-wide; rotor keeps its defaults.
	if zerolog.MessageFieldName != "message" {
		t.Fatalf("zerolog writes the message as %q", zerolog.MessageFieldName)
	}
	for _, m := range regexp.MustCompile(`"msg":"[^"]*"`).FindAllString(string(b), -1) {
		t.Errorf("README quotes %s: rotor's log lines carry the message as \"message\"", m)
	}
}
