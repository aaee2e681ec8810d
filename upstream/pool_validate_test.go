package upstream

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// keysOf returns the Key of every *KeyError joined in err, in order.
func keysOf(t *testing.T, err error) []string {
	t.Helper()
	var keys []string
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("err %T is not joined: %v", err, err)
	}
	for _, e := range j.Unwrap() {
		var ke *KeyError
		if !errors.As(e, &ke) {
			t.Fatalf("%v (%T) is not a *KeyError", e, e)
		}
		keys = append(keys, ke.Key)
	}
	return keys
}

// TestPoolConfigValidateReportsEvery: every invalid [pool] field is
// reported, each naming its key (bug: only the first, so a user needed
// three rounds of -check).
func TestPoolConfigValidateReportsEvery(t *testing.T) {
	tests := []struct {
		name string
		cfg  PoolConfig
		want []string
	}{
		{"valid", PoolConfig{Strategy: "weighted", MaxAttempts: 2, RetryStatuses: []int{429}}, nil},
		{"three at once", PoolConfig{Strategy: "bogus", MaxAttempts: -1, RetryStatuses: []int{42}},
			[]string{"pool.strategy", "pool.max_attempts", "pool.retry_statuses"}},
		{"each timeout", PoolConfig{WaitForUpstream: -1, ConnectTimeout: -time.Second, HandshakeTimeout: -1, RetryStatuses: []int{99, 600}},
			[]string{"pool.wait_for_upstream", "pool.connect_timeout", "pool.handshake_timeout", "pool.retry_statuses", "pool.retry_statuses"}},
		// A negative session TTL or body limit was taken as is.
		{"session ttl and body limit", PoolConfig{SessionTTL: -time.Minute, RetryBodyLimit: -1},
			[]string{"pool.session_ttl", "pool.retry_body_limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate() = nil")
			}
			if got := keysOf(t, err); !slices.Equal(got, tt.want) {
				t.Errorf("keys %v, want %v\n%v", got, tt.want, err)
			}
		})
	}
}
