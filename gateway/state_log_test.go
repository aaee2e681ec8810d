package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// TestOperatorDisableLogLine: the state-change line of an operator's
// disable says stage operator and no class (operator is a stage; an
// operator's disable is no failure of any class: it said
// "class":"operator"), and carries the operator's reason, as the history
// entry does (it was dropped: the line said only from and to).
func TestOperatorDisableLogLine(t *testing.T) {
	f := newAdminFixture(t, adminConfig, fixedClock())
	if code, _, body := f.do(t, "POST", "/api/upstreams/dc-1/disable", `{"detail":"maintenance window"}`); code != http.StatusOK {
		t.Fatalf("disable: %d %s", code, body)
	}
	var got map[string]any
	eventuallyTrue(t, "the state-change line", func() bool {
		for _, l := range linesWith(t, f.logs, "upstream state changed") {
			if l["upstream"] == "dc-1" && l["to"] == "disabled" {
				got = l
				return true
			}
		}
		return false
	})
	if c, ok := got["class"]; ok {
		t.Errorf("class %v on an operator's disable, want none: %v", c, got)
	}
	if got["stage"] != "operator" {
		t.Errorf("stage %v, want operator: %v", got["stage"], got)
	}
	if d, _ := got["detail"].(string); !strings.Contains(d, "maintenance window") {
		t.Errorf("detail %q, want the operator's reason: %v", d, got)
	}
	admin := linesWith(t, f.logs, "admin: upstream disabled")
	if len(admin) != 1 || !strings.Contains(admin[0]["detail"].(string), "maintenance window") {
		t.Errorf("admin line %v, want one with the operator's reason", admin)
	}
}
