package transport

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func TestIssueCertificateShape(t *testing.T) {
	ca, err := GenerateCA("test-ca", 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if pub, ok := ca.Cert.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Fatalf("CA key is %T, want ECDSA P-256", ca.Cert.PublicKey)
	}
	nc, err := ca.Issue("router-1", []string{"10.0.0.7", "router-1.internal", "localhost"}, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cert := nc.Certificate.Leaf
	if cert == nil {
		if cert, err = x509.ParseCertificate(nc.Certificate.Certificate[0]); err != nil {
			t.Fatal(err)
		}
	}
	if cert.Subject.CommonName != "router-1" {
		t.Errorf("CN = %q", cert.Subject.CommonName)
	}
	if want := []string{"router-1", "router-1.internal", "localhost"}; !slices.Equal(cert.DNSNames, want) {
		t.Errorf("DNS SANs = %q, want %q (node name first, no duplicates)", cert.DNSNames, want)
	}
	for _, ip := range []string{"10.0.0.7", "127.0.0.1", "::1"} {
		if !slices.ContainsFunc(cert.IPAddresses, net.ParseIP(ip).Equal) {
			t.Errorf("IP SANs %v lack %s", cert.IPAddresses, ip)
		}
	}
	if !cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("node cert expires %v, after its CA (%v)", cert.NotAfter, ca.Cert.NotAfter)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if name, err := verifyChain([]*x509.Certificate{cert}, ca.Pool(), usage); err != nil || name != "router-1" {
			t.Errorf("verify for usage %v: name %q, err %v", usage, name, err)
		}
	}
	other, err := GenerateCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := verifyChain([]*x509.Certificate{cert}, other.Pool(), x509.ExtKeyUsageAny); err == nil {
		t.Error("certificate verified against a foreign CA")
	}
	for _, bad := range []string{"", "-lead", "has space", "ünï", "a/b", string(make([]byte, 129))} {
		if _, err := ca.Issue(bad, nil, time.Hour); err == nil {
			t.Errorf("Issue accepted node name %q", bad)
		}
	}
	if _, err := ca.Issue("ok", nil, 0); err == nil {
		t.Error("Issue accepted zero validity")
	}
	if _, err := GenerateCA("", time.Hour); err == nil {
		t.Error("GenerateCA accepted an empty name")
	}
}

func TestNodeNameFromCertificate(t *testing.T) {
	cases := []struct {
		cn   string
		dns  []string
		want string
	}{
		{"node-1", []string{"other"}, "node-1"},
		{"", []string{"node-2", "x"}, "node-2"},
		{"not a name", []string{"*.wild", "node-3"}, "node-3"},
		{"", nil, ""},
	}
	for _, tc := range cases {
		c := &x509.Certificate{DNSNames: tc.dns}
		c.Subject.CommonName = tc.cn
		got, err := NodeName(c)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("NodeName(CN %q, DNS %q) = %q, %v; want %q", tc.cn, tc.dns, got, err, tc.want)
		}
	}
}

func TestCertFilesRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca, err := GenerateCA("files-ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.WriteFiles(dir); err != nil {
		t.Fatal(err)
	}
	loaded, err := ReadCAFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !loaded.Cert.Equal(ca.Cert) || !loaded.Key.Equal(ca.Key) {
		t.Fatal("CA read back differs")
	}
	mode(t, filepath.Join(dir, CAKeyFile), 0o600)
	mode(t, filepath.Join(dir, CACertFile), 0o644)

	files := map[string]NodeFiles{}
	for _, name := range []string{"n1", "n2"} {
		// The reloaded CA issues: what `kvmesh certs` does on a later run.
		f, err := loaded.WriteNodeFiles(dir, name, nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if f.Cert != filepath.Join(dir, name+".pem") || f.Key != filepath.Join(dir, name+"-key.pem") || f.CA != filepath.Join(dir, CACertFile) {
			t.Fatalf("unexpected file names %+v", f)
		}
		mode(t, f.Key, 0o600)
		mode(t, f.Cert, 0o644)
		files[name] = f
	}

	// Two nodes configured purely from files talk over QUIC.
	var nodes []*QUIC
	for _, name := range []string{"n1", "n2"} {
		f := files[name]
		tlsConf, err := TLSConfigFromFiles(f.CA, f.Cert, f.Key)
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig()
		cfg.TLS = tlsConf
		cfg.NodeName = name
		nodes = append(nodes, startQUIC(t, cfg))
	}
	if err := nodes[0].Send(context.Background(), nodes[1].Addr(), []byte("from files")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, nodes[1].Inbound(), wait); m.From != "n1" || string(m.Data) != "from files" {
		t.Fatalf("got %q from %q", m.Data, m.From)
	}

	// A certificate from another CA does not load against ours.
	other, err := GenerateCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	odir := t.TempDir()
	of, err := other.WriteNodeFiles(odir, "n3", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TLSConfigFromFiles(files["n1"].CA, of.Cert, of.Key); err == nil {
		t.Error("TLSConfigFromFiles accepted a certificate from another CA")
	}
	if _, err := TLSConfigFromFiles(filepath.Join(dir, "missing.pem"), of.Cert, of.Key); err == nil {
		t.Error("TLSConfigFromFiles accepted a missing CA file")
	}
	if _, err := TLSConfigFromFiles(files["n1"].CA, files["n1"].Cert, files["n2"].Key); err == nil {
		t.Error("TLSConfigFromFiles accepted a key that does not match the certificate")
	}
}

func TestLoadCAErrors(t *testing.T) {
	ca, err := GenerateCA("ca", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := GenerateCA("other", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := ca.Issue("leaf", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	sec1PEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1})
	if _, err := LoadCA(ca.CertPEM, sec1PEM); err != nil {
		t.Errorf("SEC 1 key refused: %v", err)
	}
	bad := map[string][2][]byte{
		"mismatched key": {ca.CertPEM, other.KeyPEM},
		"leaf as CA":     {nc.CertPEM, nc.KeyPEM},
		"garbage cert":   {[]byte("not pem"), ca.KeyPEM},
		"garbage key":    {ca.CertPEM, []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")},
		"wrong block":    {ca.CertPEM, ca.CertPEM},
	}
	for name, in := range bad {
		if _, err := LoadCA(in[0], in[1]); err == nil {
			t.Errorf("%s: LoadCA accepted it", name)
		}
	}
	if _, err := ReadCAFiles(t.TempDir()); err == nil {
		t.Error("ReadCAFiles of an empty directory succeeded")
	}
}

func mode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Mode().Perm(); got != want {
		t.Errorf("%s has mode %o, want %o", path, got, want)
	}
}
