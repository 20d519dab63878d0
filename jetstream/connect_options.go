package jetstream

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultURL is where a local development server listens.
const DefaultURL = "nats://127.0.0.1:4222"

// DefaultConnectTimeout bounds one dial + handshake of the first connection.
const DefaultConnectTimeout = 5 * time.Second

// Options say where and how to connect to NATS. At most one of
// User/Password, Token, NKeyFile and CredsFile is used.
type Options struct {
	// URLs are the servers of one cluster. Each entry may itself be a comma
	// separated list, as in the --nats flag. Empty means [DefaultURL].
	URLs []string

	// User and Password log in with a user name; the password is never
	// printed, not even in errors.
	User, Password string
	// Token logs in with a bearer token.
	Token string
	// NKeyFile is a file holding an NKey user seed (SU...).
	NKeyFile string
	// CredsFile is a decentralized-auth credentials file (JWT + seed).
	CredsFile string

	// TLS configures TLS towards the server.
	TLS TLSOptions

	// Name is the connection name shown by the server's monitoring.
	// Empty means "jetembed".
	Name string

	// ConnectTimeout bounds each dial and handshake of the first
	// connection. Zero means [DefaultConnectTimeout].
	ConnectTimeout time.Duration

	// Logger receives disconnect and reconnect events. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// TLSOptions are the PEM files for TLS. With none set, TLS is still used
// when the server requires it, trusting the system roots.
type TLSOptions struct {
	// CAFile holds the certificates that sign the server's certificate.
	CAFile string
	// CertFile and KeyFile are the client certificate for mutual TLS.
	CertFile, KeyFile string
}

func (t TLSOptions) enabled() bool {
	return t.CAFile != "" || t.CertFile != "" || t.KeyFile != ""
}

// config loads the files so that a missing or malformed one is reported as
// such, rather than as a failed handshake.
func (t TLSOptions) config() (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: tls ca: %w", ErrOptions, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: tls ca %s: no PEM certificate", ErrOptions, t.CAFile)
		}
		c.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("%w: tls client certificate needs both a cert and a key file", ErrOptions)
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: tls client certificate: %w", ErrOptions, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// servers splits the URL list and adds the scheme where it is missing.
func (o Options) servers() ([]string, error) {
	var out []string
	for _, u := range o.URLs {
		for _, s := range strings.Split(u, ",") {
			s = strings.TrimSpace(s)
			if s == "" {
				continue
			}
			if !strings.Contains(s, "://") {
				s = "nats://" + s
			}
			if _, err := url.Parse(s); err != nil {
				return nil, fmt.Errorf("%w: url %q: %w", ErrOptions, redact(s), err)
			}
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		out = []string{DefaultURL}
	}
	return out, nil
}

// identity names who logs in, for errors; it never includes a secret.
func (o Options) identity() string {
	switch {
	case o.CredsFile != "":
		return "with credentials file " + o.CredsFile
	case o.NKeyFile != "":
		return "with nkey seed file " + o.NKeyFile
	case o.User != "":
		return fmt.Sprintf("as user %q", o.User)
	case o.Token != "":
		return "with a token"
	}
	for _, s := range o.URLs {
		for _, part := range strings.Split(s, ",") {
			if u, err := url.Parse(strings.TrimSpace(part)); err == nil && u.User != nil {
				return fmt.Sprintf("as user %q of the URL", u.User.Username())
			}
		}
	}
	return "without credentials"
}

func (o Options) validate() error {
	n := 0
	for _, set := range []bool{o.User != "" || o.Password != "", o.Token != "", o.NKeyFile != "", o.CredsFile != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w: use only one of user/password, token, nkey and credentials file", ErrOptions)
	}
	for _, f := range []string{o.NKeyFile, o.CredsFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w: %w", ErrOptions, err)
		}
	}
	return nil
}

// redact hides a password written into a URL (nats://user:pass@host).
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
