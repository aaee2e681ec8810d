package cluster

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"

	"github.com/rotor-proxy/rotor/health"
)

// This instance's upstream credentials, as fingerprints (SetCredentials),
// and the test that keeps another instance's auth_rejected from applying
// here (foreignCred).
//
// A fingerprint is keyed with a fleet secret (credKey), not with anything
// a reader of Redis knows: keyed with the upstream's identity alone, the
// fingerprint stored in the record let anyone who read Redis (a backup, a
// replica, a read-only user) guess the upstream's password offline. The
// key is derived from the Redis password when there is one (every
// instance of the fleet gives it, and Redis does not store it with its
// data); without one it is a random key the first instance stores under
// "<prefix>:credkey" (SET NX) and every instance reads at each contact.

// credKeyInfo separates the fingerprint key derived from the Redis password
// from any other use of that password.
const credKeyInfo = "rotor fleet credential fingerprint key v1"

// fingerprint tells an upstream's credentials apart across instances
// without showing them: HMAC-SHA256 of the upstream's identity and its
// password keyed with the fleet's key, truncated to 8 bytes (hex). The
// identity is in the message, so that equal passwords of two upstreams
// differ.
func fingerprint(key []byte, identity, password string) string {
	m := hmac.New(sha256.New, key)
	_, _ = m.Write([]byte(identity))
	_, _ = m.Write([]byte{0})
	_, _ = m.Write([]byte(password))
	return hex.EncodeToString(m.Sum(nil)[:8])
}

// keyFromPassword derives the fingerprint key from the Redis password.
func keyFromPassword(pw string) []byte {
	m := hmac.New(sha256.New, []byte(pw))
	_, _ = m.Write([]byte(credKeyInfo))
	return m.Sum(nil)
}

// SetCredentials tells the cluster the password this instance uses for
// each upstream (by identity key; "" for none), replacing what it was told
// before. An auth_rejected failure is shared with a keyed fingerprint of
// it (fingerprint), and applies only on the instances whose fingerprint is
// the same (a stale password on one instance does not cool the upstream
// for the fleet). The passwords are kept in memory (as the pool keeps
// them) to fingerprint them again should the fleet's key change; they
// are never logged or written.
func (c *Cluster) SetCredentials(passwords map[string]string) {
	pws := make(map[string]string, len(passwords))
	for k, pw := range passwords {
		pws[k] = pw
	}
	c.credMu.Lock()
	c.pws = pws
	c.fingerprintAll()
	c.credMu.Unlock()
}

// fingerprintAll computes creds from pws under credKey (none while the key
// is not known). Caller holds credMu.
func (c *Cluster) fingerprintAll() {
	fp := make(map[string]string, len(c.pws))
	if c.credKey != nil {
		for k, pw := range c.pws {
			fp[k] = fingerprint(c.credKey, k, pw)
		}
	}
	c.creds = fp
}

// loadCredKey reads the fleet's random fingerprint key from Redis,
// storing it first when Redis has none (the key this instance knows, so a
// Redis restarted empty gets it back; else a new random one). Only when
// the key is not derived from the Redis password.
func (c *Cluster) loadCredKey(ctx context.Context) error {
	c.credMu.Lock()
	stored, known := c.credStored, c.credKey
	c.credMu.Unlock()
	if !stored {
		return nil
	}
	val := string(known)
	if val == "" {
		var rnd [32]byte
		_, _ = rand.Read(rnd[:])
		val = hex.EncodeToString(rnd[:])
	}
	if err := c.rdb.SetNX(ctx, c.credKeyName, val, 0).Err(); err != nil {
		return err
	}
	got, err := c.rdb.Get(ctx, c.credKeyName).Result()
	if err != nil {
		return err
	}
	c.credMu.Lock()
	if got != string(c.credKey) {
		c.credKey = []byte(got)
		c.fingerprintAll()
	}
	c.credMu.Unlock()
	return nil
}

// credOf returns this instance's credential fingerprint for key ("":
// unknown).
func (c *Cluster) credOf(key string) string {
	c.credMu.Lock()
	defer c.credMu.Unlock()
	return c.creds[key]
}

// foreignCred reports whether rec is a credential failure (credFailure)
// written with other credentials than this instance's for the upstream:
// this instance keeps its own state. While the fleet's key is not known
// yet, a failure of an upstream this instance has credentials for counts
// as foreign (the safe side: a stale password elsewhere does not cool it
// here). The first one per upstream is logged (never a password or a
// fingerprint).
func (c *Cluster) foreignCred(rec record) bool {
	if rec.Cred == "" || !credFailure(rec) {
		return false
	}
	c.credMu.Lock()
	mine := c.creds[rec.Key]
	_, has := c.pws[rec.Key]
	foreign := mine != "" && mine != rec.Cred || mine == "" && has && c.credKey == nil
	warn := foreign && !c.credWarned[rec.Key]
	if warn {
		c.credWarned[rec.Key] = true
	}
	c.credMu.Unlock()
	if warn {
		c.log.Warn().Str("upstream_key", rec.Key).Str("other", rec.Inst).
			Msg(credMsg)
	}
	return foreign
}

// credMsg is the warning about instances using other credentials.
const credMsg = "fleet: instances disagree on this upstream's credentials; another instance's auth_rejected is not applied here"

// noteOwnCred follows whether this instance's own credentials for rs's
// upstream were last rejected: set by its credential failure, ended by
// any other transition of its own (a probe that passed, an operator
// action, another failure class).
func (c *Cluster) noteOwnCred(rs health.RemoteState) {
	failed := rs.Reason == health.AuthRejected && rs.Stage != health.StageOperator &&
		(rs.State == health.Cooling || rs.State == health.Disabled)
	c.credMu.Lock()
	c.setCredFailed(rs.Key, failed)
	c.credMu.Unlock()
}

// setCredFailed sets or ends the credential failure of key. Caller holds
// credMu.
func (c *Cluster) setCredFailed(key string, failed bool) {
	if failed {
		c.credFailed[key] = true
		return
	}
	delete(c.credFailed, key)
	delete(c.credKept, key)
}

// noteAppliedCred follows the credential failure of rec's upstream after
// rec was applied here: a credential failure written with this instance's
// credentials (another instance with the same password) is this
// instance's too; anything else applied ends it.
func (c *Cluster) noteAppliedCred(rec record) {
	c.credMu.Lock()
	mine := c.creds[rec.Key]
	c.setCredFailed(rec.Key, credFailure(rec) && mine != "" && rec.Cred == mine)
	c.credMu.Unlock()
}

// keepsOwnCred reports whether this instance, whose credentials for rec's
// upstream were rejected (noteOwnCred, noteAppliedCred), keeps that state
// over rec: an automatic record not written with this instance's
// credentials (another instance's passed probe says nothing of this one's
// password). Only an operator action, or a record written with the same
// credentials, ends it; this instance's own probe decides otherwise
// (TryProbe does not take such a record as settling it).
func (c *Cluster) keepsOwnCred(rec record) bool {
	if rec.Stage == health.StageOperator.String() {
		return false
	}
	c.credMu.Lock()
	defer c.credMu.Unlock()
	mine := c.creds[rec.Key]
	return c.credFailed[rec.Key] && mine != "" && rec.Cred != mine
}

// logKept logs, once per credential failure of key, that this instance
// keeps it over another instance's record (never a password or a
// fingerprint).
func (c *Cluster) logKept(rec record) {
	c.credMu.Lock()
	first := !c.credKept[rec.Key]
	c.credKept[rec.Key] = true
	c.credMu.Unlock()
	if first {
		c.log.Warn().Str("upstream_key", rec.Key).Str("other", rec.Inst).Str("other_state", rec.State).
			Msg(staleCredMsg)
	}
}

// staleCredMsg is the warning of an instance whose credentials were
// rejected while another instance's record says the upstream serves.
const staleCredMsg = "fleet: the upstream rejected this instance's credentials and another instance's record is not about them; keeping this instance's auth_rejected state (check its password for the upstream)"

// remote is rec.remote with the history entries that are credential
// failures of other credentials than this instance's marked Foreign: the
// shared history lists them, but they are not this instance's last
// failure (an operator saw another instance's auth_rejected as the
// upstream's last failure here, where the credentials work).
func (c *Cluster) remote(rec record) (health.RemoteState, bool) {
	rs, ok := rec.remote()
	if !ok {
		return rs, false
	}
	mine := c.credOf(rec.Key)
	for i := range rs.History {
		if cred := rec.Hist[i].Cred; cred != "" && mine != "" && cred != mine {
			rs.History[i].Foreign = true
		}
	}
	return rs, true
}
