package upstream

import (
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/rotor-proxy/rotor/health"
)

// credsObserver checks, at the transition a credential change makes, which
// endpoint the pool hands out for the upstream.
type credsObserver struct {
	p    *Pool
	mu   sync.Mutex
	seen []string // the password of the endpoint Lookup returned
}

func (o *credsObserver) Transition(name string, tr health.Transition) {
	if tr.Detail != "credentials changed by a reload (config or upstream list file)" {
		return
	}
	pw := ""
	if e := o.p.Lookup(name); e != nil {
		pw, _ = e.URL.User.Password()
	}
	o.mu.Lock()
	o.seen = append(o.seen, pw)
	o.mu.Unlock()
}

func (o *credsObserver) Probe(string, bool, time.Duration) {}

// TestCredentialsChangedAfterNewEndpoints: a record cooling for
// auth_rejected is enabled for its new credentials only once the pool
// hands out the endpoint that dials with them. Bug: it was enabled (and
// its probe could pass, waking waiters) while the old endpoint, with the
// old password, was still the one picked: those waiters failed
// auth_rejected.
func TestCredentialsChangedAfterNewEndpoints(t *testing.T) {
	withPW := func(pw string) Spec {
		s := spec("auth", 10001)
		s.URL.User = url.UserPassword("msu", pw)
		return s
	}
	tp := newTestPool(t, PoolConfig{Strategy: "round-robin"}, nil, withPW("oopswrong"), spec("other", 10002))
	obs := &credsObserver{p: tp.Pool}
	tp.tr.SetObserver(obs)
	tp.tr.Fail(tp.Lookup("auth").Record(), &health.Failure{Class: health.AuthRejected, Stage: health.StageProxyAuth})
	if _, _, err := tp.Update([]Spec{withPW("realpass"), spec("other", 10002)}); err != nil {
		t.Fatal(err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.seen) != 1 || obs.seen[0] != "realpass" {
		t.Errorf("at the credential change the pool handed out the endpoint with password %q, want the new one", obs.seen)
	}
}
