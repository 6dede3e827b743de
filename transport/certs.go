package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Certificate helpers for dev and test clusters: a self-signed cluster CA
// and node certificates issued by it, all ECDSA P-256, as PEM. Production
// clusters may use any CA that issues certificates of the same shape (see
// CA.Issue); the transport only needs TLSConfigFromFiles.
//
// Files written by WriteFiles and WriteNodeFiles:
//
//	ca.pem            cluster CA certificate (0644)
//	ca-key.pem        cluster CA private key (0600), only by CA.WriteFiles
//	<name>.pem        node certificate (0644)
//	<name>-key.pem    node private key (0600)
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// clockSkew back-dates NotBefore so that a certificate issued on one machine
// is already valid on a peer whose clock is slightly behind.
const clockSkew = 5 * time.Minute

// CA is a cluster certificate authority.
type CA struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// NodeCert is a node certificate issued by a CA.
type NodeCert struct {
	Name    string
	CertPEM []byte
	KeyPEM  []byte
	// Certificate is CertPEM and KeyPEM parsed, ready for tls.Config.
	Certificate tls.Certificate
}

// NodeFiles names the files WriteNodeFiles wrote.
type NodeFiles struct {
	CA, Cert, Key string
}

// GenerateCA creates a self-signed CA valid for validFor from now.
func GenerateCA(name string, validFor time.Duration) (*CA, error) {
	if name == "" {
		return nil, errors.New("transport: CA name is empty")
	}
	if validFor <= 0 {
		return nil, errors.New("transport: CA validity must be > 0")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("transport: generate CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name, Organization: []string{"kvmesh"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(validFor),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true, // issues node certificates only, no intermediates
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("transport: create CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return LoadCA(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM)
}

// LoadCA parses a CA certificate and its private key from PEM (the key as
// PKCS#8 or SEC 1) and checks that they belong together.
func LoadCA(certPEM, keyPEM []byte) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("transport: certificate is not a CA")
	}
	key, err := parseECKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, errors.New("transport: CA key does not match CA certificate")
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// ReadCAFiles loads ca.pem and ca-key.pem from dir (as written by WriteFiles).
func ReadCAFiles(dir string) (*CA, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return LoadCA(certPEM, keyPEM)
}

// Pool returns a pool holding only this CA, for tls.Config.RootCAs/ClientCAs.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Issue creates a certificate for node nodeName, valid for validFor (capped
// at the CA's own expiry), usable as TLS server and client certificate.
// The node name goes into the CommonName and is the first DNS SAN; hosts
// (IP addresses or DNS names) follow, and 127.0.0.1, ::1 and localhost are
// always added so that loopback clusters work without listing them.
func (ca *CA) Issue(nodeName string, hosts []string, validFor time.Duration) (*NodeCert, error) {
	if err := ValidNodeName(nodeName); err != nil {
		return nil, err
	}
	if validFor <= 0 {
		return nil, errors.New("transport: certificate validity must be > 0")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("transport: generate node key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(validFor)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: nodeName, Organization: []string{"kvmesh"}},
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{nodeName},
	}
	for _, h := range append(slices.Clone(hosts), "127.0.0.1", "::1", "localhost") {
		if h == "" {
			continue
		}
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		} else if !slices.Contains(tmpl.DNSNames, h) {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("transport: issue certificate for %q: %w", nodeName, err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	tc, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return &NodeCert{Name: nodeName, CertPEM: certPEM, KeyPEM: keyPEM, Certificate: tc}, nil
}

// TLSConfig returns a tls.Config for NewQUIC holding nc and this CA's pool.
func (ca *CA) TLSConfig(nc *NodeCert) *tls.Config {
	pool := ca.Pool()
	return &tls.Config{
		Certificates: []tls.Certificate{nc.Certificate},
		RootCAs:      pool,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}
}

// WriteFiles writes ca.pem (0644) and ca-key.pem (0600) into dir, creating
// dir (0700) if needed.
func (ca *CA) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, CACertFile), ca.CertPEM, 0o644); err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(dir, CAKeyFile), ca.KeyPEM, 0o600)
}

// WriteFiles writes <name>.pem (0644) and <name>-key.pem (0600) into dir.
func (nc *NodeCert) WriteFiles(dir string) (certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("transport: %w", err)
	}
	certFile = filepath.Join(dir, nc.Name+".pem")
	keyFile = filepath.Join(dir, nc.Name+"-key.pem")
	if err := writeFileAtomic(certFile, nc.CertPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(keyFile, nc.KeyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// WriteNodeFiles issues a certificate for nodeName and writes everything that
// node needs into dir: ca.pem, <name>.pem and <name>-key.pem (not the CA
// key). The result feeds TLSConfigFromFiles.
func (ca *CA) WriteNodeFiles(dir, nodeName string, hosts []string, validFor time.Duration) (NodeFiles, error) {
	nc, err := ca.Issue(nodeName, hosts, validFor)
	if err != nil {
		return NodeFiles{}, err
	}
	certFile, keyFile, err := nc.WriteFiles(dir)
	if err != nil {
		return NodeFiles{}, err
	}
	caFile := filepath.Join(dir, CACertFile)
	if err := writeFileAtomic(caFile, ca.CertPEM, 0o644); err != nil {
		return NodeFiles{}, err
	}
	return NodeFiles{CA: caFile, Cert: certFile, Key: keyFile}, nil
}

// TLSConfigFromFiles loads a node's certificate and key and the cluster CA
// (any number of PEM certificates in caFile) into a tls.Config for NewQUIC.
// It checks that the node certificate verifies against the CA and carries a
// valid node name, so a mismatched file set fails at start-up.
func TLSConfigFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("transport: no certificate in %s", caFile)
	}
	tc, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	chain, err := parseChain(tc)
	if err != nil {
		return nil, fmt.Errorf("transport: %s: %w", certFile, err)
	}
	if _, err := verifyChain(chain, pool, x509.ExtKeyUsageAny); err != nil {
		return nil, fmt.Errorf("transport: %s does not verify against %s: %w", certFile, caFile, err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{tc},
		RootCAs:      pool,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS13,
	}, nil
}

func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("transport: serial number: %w", err)
	}
	return s, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("transport: encode key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

func parseCertPEM(b []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New("transport: no PEM CERTIFICATE block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return cert, nil
}

func parseECKeyPEM(b []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("transport: no PEM key block")
	}
	switch block.Type {
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("transport: %w", err)
		}
		ek, ok := k.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("transport: CA key is %T, want ECDSA", k)
		}
		return ek, nil
	case "EC PRIVATE KEY":
		k, err := x509.ParseECPrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("transport: %w", err)
		}
		return k, nil
	default:
		return nil, fmt.Errorf("transport: unexpected PEM block %q", block.Type)
	}
}

// writeFileAtomic writes via a temporary file and rename so that a reader
// never sees half a key, and so that the mode is right from the first byte.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("transport: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("transport: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("transport: write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("transport: %w", err)
	}
	return nil
}
