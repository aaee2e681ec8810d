package cluster

// This instance's upstream credentials, as fingerprints (SetCredentials),
// and the test that keeps another instance's auth_rejected from applying
// here (foreignCred).

// SetCredentials tells the cluster the password this instance uses for
// each upstream (by identity key; "" for none), replacing what it was told
// before. Only a keyed fingerprint of each is kept (fingerprint): an
// auth_rejected failure is shared with it, and applies only on the
// instances whose fingerprint is the same (a stale password on one
// instance does not cool the upstream for the fleet).
func (c *Cluster) SetCredentials(passwords map[string]string) {
	fp := make(map[string]string, len(passwords))
	for k, pw := range passwords {
		fp[k] = fingerprint(k, pw)
	}
	c.credMu.Lock()
	c.creds = fp
	c.credMu.Unlock()
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
// this instance keeps its own state. The first one per upstream is logged
// (never a password or a fingerprint).
func (c *Cluster) foreignCred(rec record) bool {
	if rec.Cred == "" || !credFailure(rec) {
		return false
	}
	c.credMu.Lock()
	mine := c.creds[rec.Key]
	foreign := mine != "" && mine != rec.Cred
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
