package jetstream

import (
	"testing"

	"github.com/jetembed/jetembed/internal/natstest"
)

// testPKI is a throw-away CA and a certificate for 127.0.0.1 it signed,
// written as PEM files (natstest.WriteTLS).
type testPKI struct {
	CAFile, CertFile, KeyFile string
	// ClientCertFile and ClientKeyFile are a client certificate of the CA:
	// the same one, which is good for client auth too.
	ClientCertFile, ClientKeyFile string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	ca, cert, key := natstest.WriteTLS(t, t.TempDir())
	return testPKI{CAFile: ca, CertFile: cert, KeyFile: key, ClientCertFile: cert, ClientKeyFile: key}
}
