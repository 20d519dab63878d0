package gateway

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"time"
)

// minRSABits is the smallest RSA key the gateway starts with.
const minRSABits = 2048

// modernSuites are the TLS 1.2 suites offered: forward secret AEADs only
// (no CBC, no RSA key exchange). TLS 1.3 has only such suites.
var modernSuites = []uint16{
	tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
	tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
	tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
	tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
}

// checkCert refuses a certificate that is expired, not yet valid, or
// whose RSA key is under 2048 bits, unless allow (then each problem is
// logged as an error), and warns of one that expires within two weeks.
func checkCert(cert *tls.Certificate, now time.Time, allow bool, log *slog.Logger) error {
	if len(cert.Certificate) == 0 {
		return fmt.Errorf("%w: tls: no certificate in the file", ErrConfig)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return fmt.Errorf("%w: tls certificate: %w", ErrConfig, err)
	}
	var problems []string
	switch {
	case now.Before(leaf.NotBefore):
		problems = append(problems, fmt.Sprintf("the certificate is not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339)))
	case now.After(leaf.NotAfter):
		problems = append(problems, fmt.Sprintf("the certificate expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339)))
	case leaf.NotAfter.Sub(now) < 14*24*time.Hour:
		log.Warn("gateway: the TLS certificate expires soon", "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if k, ok := leaf.PublicKey.(*rsa.PublicKey); ok && k.N.BitLen() < minRSABits {
		problems = append(problems, fmt.Sprintf("its RSA key has %d bits, under %d", k.N.BitLen(), minRSABits))
	}
	if len(problems) == 0 {
		return nil
	}
	if !allow {
		return fmt.Errorf("%w: tls: %s (--tls-allow-weak starts anyway)", ErrConfig, joinProblems(problems))
	}
	for _, p := range problems {
		log.Error("gateway: serving HTTPS with a weak or invalid certificate because --tls-allow-weak is set: clients will refuse it or be at risk", "problem", p)
	}
	cert.Leaf = leaf
	return nil
}

func joinProblems(ps []string) string {
	out := ps[0]
	for _, p := range ps[1:] {
		out += "; " + p
	}
	return out
}

// tlsConfig is the server side of HTTPS: TLS 1.2 with modern suites, or
// 1.3.
func tlsConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, CipherSuites: modernSuites}
}
