package gateway_test

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetembed/jetembed/gateway"
)

// writeCert writes a self-signed certificate for 127.0.0.1 valid from
// notBefore to notAfter, with key (an *rsa.PrivateKey or
// *ecdsa.PrivateKey), and returns the certificate and key files.
func writeCert(t *testing.T, key any, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "jetembed-test"},
		NotBefore: notBefore, NotAfter: notAfter, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	var pub any
	switch k := key.(type) {
	case *rsa.PrivateKey:
		pub = &k.PublicKey
	case *ecdsa.PrivateKey:
		pub = &k.PublicKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestTLSRefusesWeakCertificates is reproduction 6 of issue 24: the
// gateway does not start with an expired or not yet valid certificate or
// an RSA key under 2048 bits (unless told to, loudly), and its TLS 1.2
// offers no CBC suite.
func TestTLSRefusesWeakCertificates(t *testing.T) {
	now := time.Now()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	weak, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name                string
		key                 any
		notBefore, notAfter time.Time
		want                string
	}{
		{"expired", ec, now.Add(-48 * time.Hour), now.Add(-time.Hour), "expired"},
		{"not yet valid", ec, now.Add(time.Hour), now.Add(48 * time.Hour), "not valid before"},
		{"1024-bit RSA", weak, now.Add(-time.Hour), now.Add(365 * 24 * time.Hour), "1024 bits"},
	} {
		certFile, keyFile := writeCert(t, c.key, c.notBefore, c.notAfter)
		_, err := gateway.New(gateway.Config{Requester: fleet{}, TLSCertFile: certFile, TLSKeyFile: keyFile})
		if !errors.Is(err, gateway.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: New: %v, want a refusal saying %q", c.name, err, c.want)
		}
		var log bytes.Buffer
		gw, err := gateway.New(gateway.Config{Requester: fleet{}, TLSCertFile: certFile, TLSKeyFile: keyFile, AllowWeakTLS: true,
			Logger: slog.New(slog.NewJSONHandler(&log, nil))})
		if err != nil || !gw.TLS() || !strings.Contains(log.String(), `"level":"ERROR"`) || !strings.Contains(log.String(), c.want) {
			t.Errorf("%s with AllowWeakTLS: %v; log %s", c.name, err, log.String())
		}
	}

	certFile, keyFile := writeCert(t, ec, now.Add(-time.Hour), now.Add(365*24*time.Hour))
	gw, err := gateway.New(gateway.Config{Requester: fleet{}, TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, gw)
	dial := func(suites []uint16, maxVersion uint16) error {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true, CipherSuites: suites, MaxVersion: maxVersion})
		if err == nil {
			c.Close()
		}
		return err
	}
	cbc := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA, tls.TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256}
	if err := dial(cbc, tls.VersionTLS12); err == nil {
		t.Error("a TLS 1.2 client offering only CBC-SHA suites was served")
	}
	if err := dial([]uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256}, tls.VersionTLS12); err != nil {
		t.Errorf("a TLS 1.2 client with an AEAD suite: %v", err)
	}
	if err := dial(nil, tls.VersionTLS11); err == nil {
		t.Error("a TLS 1.1 client was served")
	}
	if err := dial(nil, 0); err != nil {
		t.Errorf("a TLS 1.3 client: %v", err)
	}
}
