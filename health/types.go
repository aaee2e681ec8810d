// Package health owns rotor's model of upstream health: failure classes and
// stages, the per-upstream state machine (eligible, cooling, probe_allowed,
// disabled), cooldown policy, transition history and the prober loop.
//
// It does not dial, select or relay anything, and it imports none of rotor's
// other packages: upstream and gateway classify what they observe into a
// *Failure and report it here.
package health

import (
	"fmt"
	"time"
)

// Class is the kind of a failure. Its strings are part of the user-facing
// contract (admin API, metrics labels, logs, config table names).
type Class uint8

// Failure classes. ClassNone is the zero value and means "no failure".
const (
	ClassNone Class = iota
	Refused
	Timeout
	AuthRejected
	UpstreamError
	SlowBody
	TargetHTTPError
	// TargetUnreachable is a target failure reported correctly by a healthy
	// upstream (SOCKS reply 3/4/5, squid ERR_CONNECT_FAIL, tinyproxy 500).
	// It is recorded per upstream but never cools it on its own.
	TargetUnreachable
	// TargetTimeout is a target that did not answer in time behind a
	// healthy upstream (SOCKS reply 6, squid 503 ERR_CONNECT_FAIL 110).
	TargetTimeout
	// Operator is the reason of a record disabled by an operator.
	Operator
	numClasses
)

var classNames = [...]string{
	ClassNone:         "none",
	Refused:           "refused",
	Timeout:           "timeout",
	AuthRejected:      "auth_rejected",
	UpstreamError:     "upstream_error",
	SlowBody:          "slow_body",
	TargetHTTPError:   "target_http_error",
	TargetUnreachable: "target_unreachable",
	TargetTimeout:     "target_timeout",
	Operator:          "operator",
}

// String returns the contract string ("refused", ...).
func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return fmt.Sprintf("class(%d)", uint8(c))
}

// MarshalText encodes the class as its contract string.
func (c Class) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses a contract string.
func (c *Class) UnmarshalText(b []byte) error {
	v, ok := ParseClass(string(b))
	if !ok {
		return fmt.Errorf("unknown failure class %q", b)
	}
	*c = v
	return nil
}

// ParseClass returns the class named s.
func ParseClass(s string) (Class, bool) {
	for i, n := range classNames {
		if n == s {
			return Class(i), true
		}
	}
	return ClassNone, false
}

// AllClasses lists every class a record's last failure can have (all but
// ClassNone), in declaration order.
func AllClasses() []Class {
	out := make([]Class, 0, numClasses-1)
	for c := ClassNone + 1; c < numClasses; c++ {
		out = append(out, c)
	}
	return out
}

// IsTargetFailure reports whether the class blames the target rather than
// the upstream that carried the attempt.
func (c Class) IsTargetFailure() bool { return c == TargetUnreachable || c == TargetTimeout }

// Stage is where in a connection's life a failure happened.
type Stage uint8

// Stages, in the order a connection passes through them.
const (
	StageNone Stage = iota
	StageDial
	StageProxyHandshake
	StageProxyAuth
	StageTargetConnect
	StageFirstByte
	StageBody
	StageHTTPStatus
	StageProbe
	StageOperator
	numStages
)

var stageNames = [...]string{
	StageNone:           "none",
	StageDial:           "dial",
	StageProxyHandshake: "proxy_handshake",
	StageProxyAuth:      "proxy_auth",
	StageTargetConnect:  "target_connect",
	StageFirstByte:      "first_byte",
	StageBody:           "body",
	StageHTTPStatus:     "http_status",
	StageProbe:          "probe",
	StageOperator:       "operator",
}

// String returns the contract string ("proxy_handshake", ...).
func (s Stage) String() string {
	if int(s) < len(stageNames) {
		return stageNames[s]
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// MarshalText encodes the stage as its contract string.
func (s Stage) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a contract string.
func (s *Stage) UnmarshalText(b []byte) error {
	for i, n := range stageNames {
		if n == string(b) {
			*s = Stage(i)
			return nil
		}
	}
	return fmt.Errorf("unknown stage %q", b)
}

// State is an upstream record's place in the health state machine.
type State uint8

// States. Only Eligible records receive client traffic.
const (
	Eligible State = iota
	Cooling
	ProbeAllowed
	Disabled
	numStates
)

var stateNames = [...]string{
	Eligible:     "eligible",
	Cooling:      "cooling",
	ProbeAllowed: "probe_allowed",
	Disabled:     "disabled",
}

// String returns the contract string ("cooling", ...).
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// MarshalText encodes the state as its contract string.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText parses a contract string.
func (s *State) UnmarshalText(b []byte) error {
	for i, n := range stateNames {
		if n == string(b) {
			*s = State(i)
			return nil
		}
	}
	return fmt.Errorf("unknown state %q", b)
}

// AllStates lists every state, for metrics that must report zeros.
func AllStates() []State { return []State{Eligible, Cooling, ProbeAllowed, Disabled} }

// Failure is the one error type that crosses from upstream and gateway into
// health. Callers find it with errors.As; nobody inspects error strings.
type Failure struct {
	Class Class
	Stage Stage
	// Target is the host:port (or host) the attempt was for, when known.
	// Per-target scoped cooldowns key on its host (its host:port for
	// ScopePort); the target-failure rule counts only host:port targets
	// another upstream reached.
	Target string
	// Scope ScopeTarget marks a refusal of this one destination host by
	// the upstream (SOCKS5 reply 1 or 8, an answer the proxy may not have
	// written itself): the upstream works, it will not go there. It cools
	// the upstream for Target's host only, whatever the class's
	// configured scope, and counts towards the target-failure rule
	// (refusing many hosts that others reach cools it entirely).
	// ScopePort is the same for a policy refusal of Target's port (CONNECT
	// answered 403, squid ERR_ACCESS_DENIED, SOCKS5 reply 2): proxies
	// refuse by port (squid's SSL_ports, tinyproxy's ConnectPort), so it
	// cools the upstream for that host:port only.
	Scope Scope
	Err   error // the cause; feeds the history "detail"
}

// Error returns "stage: class: cause".
func (f *Failure) Error() string {
	if f.Err == nil {
		return f.Stage.String() + ": " + f.Class.String()
	}
	return f.Stage.String() + ": " + f.Class.String() + ": " + f.Err.Error()
}

// Unwrap returns the cause.
func (f *Failure) Unwrap() error { return f.Err }

// Clock is the time source. Deadlines are compared with values from Now
// (monotonic in production); wall-clock equivalents are derived only for
// display and persistence. A nil Clock means real time.
type Clock interface {
	Now() time.Time
	// After behaves like time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock returns the process clock.
func RealClock() Clock { return realClock{} }
