package health

// PeerScrubber is implemented by dialers that know the secrets text a
// peer sends may echo (every upstream password, the clients' passwords,
// the admin token): the prober passes what the probe target or the proxy
// answered (a TLS error naming a certificate's hosts, a response line
// that does not parse) through ScrubPeer before it becomes the record's
// detail, its history and a log line. A dialer without it leaves the
// text as it is (the gateway's last pass still hides long secrets).
type PeerScrubber interface {
	ScrubPeer(s string) string
}

// scrubPeerErr returns err with its text through d's ScrubPeer when d is
// a PeerScrubber and the text changes; errors.Is and errors.As still see
// err.
func scrubPeerErr(d Dialer, err error) error {
	ps, ok := d.(PeerScrubber)
	if !ok || err == nil {
		return err
	}
	msg := err.Error()
	if s := ps.ScrubPeer(msg); s != msg {
		return &scrubbedErr{msg: s, err: err}
	}
	return err
}

// scrubbedErr is an error whose text was scrubbed, unwrapping to the
// original.
type scrubbedErr struct {
	msg string
	err error
}

func (e *scrubbedErr) Error() string { return e.msg }
func (e *scrubbedErr) Unwrap() error { return e.err }
