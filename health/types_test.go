package health

import (
	"errors"
	"io"
	"testing"
)

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		name string
		v    interface {
			String() string
			MarshalText() ([]byte, error)
		}
		want string
	}{
		{"class none", ClassNone, "none"},
		{"class refused", Refused, "refused"},
		{"class timeout", Timeout, "timeout"},
		{"class auth_rejected", AuthRejected, "auth_rejected"},
		{"class upstream_error", UpstreamError, "upstream_error"},
		{"class slow_body", SlowBody, "slow_body"},
		{"class target_http_error", TargetHTTPError, "target_http_error"},
		{"class target_unreachable", TargetUnreachable, "target_unreachable"},
		{"class target_timeout", TargetTimeout, "target_timeout"},
		{"class operator", Operator, "operator"},
		{"class unknown", Class(200), "class(200)"},
		{"stage none", StageNone, "none"},
		{"stage dial", StageDial, "dial"},
		{"stage proxy_handshake", StageProxyHandshake, "proxy_handshake"},
		{"stage proxy_auth", StageProxyAuth, "proxy_auth"},
		{"stage target_connect", StageTargetConnect, "target_connect"},
		{"stage first_byte", StageFirstByte, "first_byte"},
		{"stage body", StageBody, "body"},
		{"stage http_status", StageHTTPStatus, "http_status"},
		{"stage probe", StageProbe, "probe"},
		{"stage operator", StageOperator, "operator"},
		{"stage unknown", Stage(99), "stage(99)"},
		{"state eligible", Eligible, "eligible"},
		{"state cooling", Cooling, "cooling"},
		{"state probe_allowed", ProbeAllowed, "probe_allowed"},
		{"state disabled", Disabled, "disabled"},
		{"state unknown", State(9), "state(9)"},
		{"scope default", ScopeDefault, ""},
		{"scope upstream", ScopeUpstream, "upstream"},
		{"scope target", ScopeTarget, "target"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			b, err := tt.v.MarshalText()
			if err != nil || string(b) != tt.want {
				t.Errorf("MarshalText() = %q, %v; want %q", b, err, tt.want)
			}
		})
	}
}

func TestEnumRoundTrip(t *testing.T) {
	for c := range numClasses {
		var got Class
		if err := got.UnmarshalText([]byte(c.String())); err != nil || got != c {
			t.Errorf("class %v: got %v, %v", c, got, err)
		}
	}
	for s := range numStages {
		var got Stage
		if err := got.UnmarshalText([]byte(s.String())); err != nil || got != s {
			t.Errorf("stage %v: got %v, %v", s, got, err)
		}
	}
	for _, s := range AllStates() {
		var got State
		if err := got.UnmarshalText([]byte(s.String())); err != nil || got != s {
			t.Errorf("state %v: got %v, %v", s, got, err)
		}
	}
	for _, s := range []Scope{ScopeUpstream, ScopeTarget} {
		var got Scope
		if err := got.UnmarshalText([]byte(s.String())); err != nil || got != s {
			t.Errorf("scope %v: got %v, %v", s, got, err)
		}
	}
	var c Class
	var st Stage
	var s State
	var sc Scope
	for name, err := range map[string]error{
		"class": c.UnmarshalText([]byte("bogus")), "stage": st.UnmarshalText([]byte("bogus")),
		"state": s.UnmarshalText([]byte("bogus")), "scope": sc.UnmarshalText([]byte("bogus")),
	} {
		if err == nil {
			t.Errorf("%s: UnmarshalText(bogus) = nil, want error", name)
		}
	}
}

func TestIsTargetFailure(t *testing.T) {
	for c := range numClasses {
		want := c == TargetUnreachable || c == TargetTimeout
		if got := c.IsTargetFailure(); got != want {
			t.Errorf("%v.IsTargetFailure() = %v, want %v", c, got, want)
		}
	}
}

func TestFailureError(t *testing.T) {
	f := &Failure{Class: Refused, Stage: StageDial, Err: io.EOF}
	if got, want := f.Error(), "dial: refused: EOF"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(f, io.EOF) {
		t.Error("errors.Is(f, io.EOF) = false")
	}
	var got *Failure
	if !errors.As(errors.Join(errors.New("x"), f), &got) || got != f {
		t.Error("errors.As did not find the failure")
	}
	if got, want := (&Failure{Class: Timeout, Stage: StageProbe}).Error(), "probe: timeout"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}
