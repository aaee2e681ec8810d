package upstream

import (
	"testing"
	"time"
)

// TestNoEligibleErrorText pins the expired wait's texts, singular and
// plural. Issue: "the 1 upstreams are eligible but all at their rate
// limit".
func TestNoEligibleErrorText(t *testing.T) {
	tests := []struct {
		ne   NoEligibleError
		want string
	}{
		{NoEligibleError{Matching: 1, AtRate: 1}, "no eligible upstream: the only upstream is eligible but at its rate limit"},
		{NoEligibleError{Matching: 2, AtRate: 2}, "no eligible upstream: the 2 upstreams are eligible but all at their rate limit"},
		{NoEligibleError{Matching: 1, AtMaxConns: 1, Tags: []string{"us"}},
			`no eligible upstream: the only upstream with tags "us" is eligible but at its max_conns`},
		{NoEligibleError{Matching: 3, AtMaxConns: 1, AtRate: 1},
			"no eligible upstream: 2 of the 3 upstreams are eligible but at their max_conns or rate limit, the other is out"},
		{NoEligibleError{Matching: 3, AtMaxConns: 1}, "no eligible upstream: 1 of the 3 upstreams is eligible but at its max_conns, the rest are out"},
		{NoEligibleError{Matching: 1, Tags: []string{"us"}}, `no eligible upstream: the only upstream with tags "us" is not eligible`},
		{NoEligibleError{Matching: 2, Tags: []string{"us"}}, `no eligible upstream: none of the 2 upstreams with tags "us" is eligible`},
		{NoEligibleError{Matching: 1, Host: "h.example", HostCooling: 1},
			"no eligible upstream for h.example: the only upstream is cooling for this host only (it refused or banned it)"},
		{NoEligibleError{Matching: 4, Host: "h.example", HostCooling: 1, AtRate: 1},
			"no eligible upstream for h.example: 1 of the 4 upstreams is cooling for this host only (it refused or banned it), 1 is at its rate limit, the rest are out"},
		{NoEligibleError{Matching: 3, Host: "h.example", HostCooling: 2},
			"no eligible upstream for h.example: 2 of the 3 upstreams are cooling for this host only (it refused or banned them), the other is out"},
		{NoEligibleError{Matching: 2, Host: "127.0.0.1", Target: "127.0.0.1:31102", HostCooling: 2, PortCooling: 2},
			"no eligible upstream for 127.0.0.1:31102: 2 of the 2 upstreams are cooling for this host:port only (it refused or banned them)"},
		{NoEligibleError{Matching: 3, Host: "127.0.0.1", Target: "127.0.0.1:31102", HostCooling: 2, PortCooling: 1},
			"no eligible upstream for 127.0.0.1:31102: 2 of the 3 upstreams are cooling for this host or this host:port only (it refused or banned them), the other is out"},
		{NoEligibleError{Matching: 3, Wait: time.Second}, "no eligible upstream"},
		{NoEligibleError{Matching: 1, Tags: []string{"rl"}, Freed: 1},
			`no eligible upstream: the only upstream with tags "rl" is eligible; its limit freed a slot or token only as the wait ended`},
		{NoEligibleError{Matching: 3, Freed: 2},
			"no eligible upstream: 2 of the 3 upstreams are eligible; their limits freed a slot or token only as the wait ended"},
		{NoEligibleError{Tags: []string{"x"}}, `no eligible upstream: no upstream has tags "x"`},
	}
	for _, tc := range tests {
		if got := tc.ne.Error(); got != tc.want {
			t.Errorf("%+v:\n got %q\nwant %q", tc.ne, got, tc.want)
		}
	}
}
