package health

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// scrubDialer dials addr whatever it is asked for and hides the words
// of secrets in peer text (PeerScrubber), as the upstream dialers do with
// every secret rotor holds.
type scrubDialer struct {
	addr    string
	secrets []string
}

func (d scrubDialer) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var nd net.Dialer
	return nd.DialContext(ctx, network, d.addr)
}

func (d scrubDialer) ScrubPeer(s string) string {
	for _, sec := range d.secrets {
		s = strings.ReplaceAll(s, sec, "xxxxx")
	}
	return s
}

// TestProbeScrubsPeerText: what the probe target sent went into the
// probe's error, the record's detail and the log as it was: a TLS error
// names the hosts of the target's certificate. Now it goes through the
// dialer's ScrubPeer (any secret of any length), and the error still
// unwraps to its cause.
func TestProbeScrubsPeerText(t *testing.T) {
	t.Run("a TLS error", func(t *testing.T) {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
		srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshake the probe breaks off
		srv.StartTLS()
		t.Cleanup(srv.Close)
		roots := x509.NewCertPool()
		roots.AddCert(srv.Certificate())
		// The test certificate is for example.com and 127.0.0.1: asked
		// for another name, the error names the certificate's.
		err := runProbeSpec(t, ProbeConfig{URL: "https://other.test/", TLS: &tls.Config{RootCAs: roots}},
			scrubDialer{addr: srv.Listener.Addr().String(), secrets: []string{"example"}})
		if err == nil {
			t.Fatal("the probe passed")
		}
		if strings.Contains(err.Error(), "example") || !strings.Contains(err.Error(), "xxxxx") {
			t.Errorf("probe error %q: want the name hidden", err)
		}
		if !errors.As(err, new(*tls.CertificateVerificationError)) {
			t.Errorf("probe error %q no longer unwraps to its cause", err)
		}
	})
}
