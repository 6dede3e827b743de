package transport

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// Node identity and peer verification.
//
// A node's name is carried by its certificate: the CommonName, or, when the
// CommonName is empty or not a valid node name, the first DNS SAN that is
// one (CA.Issue puts the name in both). Message.From on QUIC is that name,
// read from the peer certificate that was verified against the cluster CA, so
// a peer cannot claim another node's name without that node's key.
//
// Addresses are not bound to names: any certificate from the cluster CA is
// accepted from any address (cluster addresses come from serf, and a node
// may restart elsewhere). Trust is "issued by our CA", nothing more.

// maxNodeNameLen keeps names usable as a DNS label-ish SAN and a metric or
// log field.
const maxNodeNameLen = 128

// ValidNodeName reports whether s can be a node name: 1 to 128 characters,
// ASCII letters, digits, '.', '-' and '_', starting with a letter or digit.
func ValidNodeName(s string) error {
	if s == "" || len(s) > maxNodeNameLen {
		return fmt.Errorf("transport: node name must be 1..%d characters, got %d", maxNodeNameLen, len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '-' && c != '_') {
			return fmt.Errorf("transport: invalid node name %q (letters, digits, '.', '-', '_'; starting with a letter or digit)", s)
		}
	}
	return nil
}

// NodeName returns the node name a certificate carries (see the comment at
// the top of identity.go).
func NodeName(cert *x509.Certificate) (string, error) {
	if ValidNodeName(cert.Subject.CommonName) == nil {
		return cert.Subject.CommonName, nil
	}
	for _, n := range cert.DNSNames {
		if ValidNodeName(n) == nil {
			return n, nil
		}
	}
	return "", errors.New("transport: certificate carries no node name (CommonName or DNS SAN)")
}

// verifyChain checks certs (leaf first, then any intermediates) against the
// CA pool for the given extended key usage and returns the leaf's node name.
func verifyChain(certs []*x509.Certificate, pool *x509.CertPool, usage x509.ExtKeyUsage) (string, error) {
	if len(certs) == 0 {
		return "", errors.New("no certificate presented")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}); err != nil {
		return "", err
	}
	return NodeName(certs[0])
}

// parseChain parses a tls.Certificate's DER chain.
func parseChain(tc tls.Certificate) ([]*x509.Certificate, error) {
	out := make([]*x509.Certificate, 0, len(tc.Certificate))
	for _, der := range tc.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// tlsPair is the server and client side TLS configuration of one node.
type tlsPair struct {
	server, client *tls.Config
	self           string // this node's name, from its own certificate
}

// buildTLS derives the server and client configurations from the user's
// base config. Both sides require TLS 1.3 and ALPN "kvmesh/1", present the
// node certificate and verify the peer's chain against the cluster CA
// themselves (the client skips host name checks, see above). onReject is
// called for every peer refused, with "client" or "server" for our side.
func buildTLS(base *tls.Config, onReject func(side string, err error)) (tlsPair, error) {
	pool := base.RootCAs
	if pool == nil {
		pool = base.ClientCAs
	}
	own, err := parseChain(base.Certificates[0])
	if err != nil {
		return tlsPair{}, fmt.Errorf("transport: parse own certificate: %w", err)
	}
	self, err := verifyChain(own, pool, x509.ExtKeyUsageAny)
	if err != nil {
		return tlsPair{}, fmt.Errorf("transport: own certificate does not verify against the cluster CA: %w", err)
	}
	verify := func(side string, usage x509.ExtKeyUsage) func(tls.ConnectionState) error {
		return func(cs tls.ConnectionState) error {
			if _, err := verifyChain(cs.PeerCertificates, pool, usage); err != nil {
				err = fmt.Errorf("transport: peer certificate rejected: %w", err)
				onReject(side, err)
				return err
			}
			return nil
		}
	}
	certs := []tls.Certificate{base.Certificates[0]}
	return tlsPair{
		self: self,
		server: &tls.Config{
			Certificates: certs,
			MinVersion:   tls.VersionTLS13,
			NextProtos:   []string{ALPN},
			// A certificate is requested and then verified (its presence
			// included) in VerifyConnection, so that both directions share
			// one check and one rejection counter.
			ClientAuth:       tls.RequestClientCert,
			VerifyConnection: verify("server", x509.ExtKeyUsageClientAuth),
		},
		client: &tls.Config{
			Certificates: certs,
			MinVersion:   tls.VersionTLS13,
			NextProtos:   []string{ALPN},
			// Not insecure: the chain is verified in VerifyConnection; only
			// the host name check is skipped, as names are not addresses.
			InsecureSkipVerify: true, //nolint:gosec // verified in VerifyConnection
			VerifyConnection:   verify("client", x509.ExtKeyUsageServerAuth),
		},
	}, nil
}
