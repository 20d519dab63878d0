package jetstream

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
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

	// InboxPrefix is the prefix of the connection's reply inboxes (request
	// replies, JetStream API answers, push deliveries): a tenant's
	// permissions let it subscribe only to _INBOX_<tenant>.>. Empty means
	// nats.go's _INBOX.
	InboxPrefix string

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
				return nil, fmt.Errorf("%w: url %q: %w", ErrOptions, redact(s), urlError(err))
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
			u, err := url.Parse(strings.TrimSpace(part))
			if err != nil || u.User == nil {
				continue
			}
			if _, ok := u.User.Password(); ok {
				return fmt.Sprintf("as user %q of the URL", u.User.Username())
			}
			return "with the token of the URL"
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

// RedactURL hides the credentials of a server URL: the password of
// nats://user:password@host, and the whole userinfo of nats://token@host
// (a user name without a password is a token). A URL that does not parse
// loses everything up to its last '@'. It is what every log line, error
// and printed configuration shows of a URL.
func RedactURL(s string) string {
	if !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil && u.Host == "" {
		// Unparsable, or "user:password@host" without a scheme (which
		// parses as the scheme "user" with an opaque rest).
		at := strings.LastIndex(s, "@")
		if i := strings.Index(s, "://"); i >= 0 && i < at {
			return s[:i+3] + "xxxxx" + s[at:]
		}
		return "xxxxx" + s[at:]
	}
	if u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	} else {
		u.User = url.User("xxxxx")
	}
	return u.String()
}

// RedactURLs is [RedactURL] of each URL of a comma-separated list (the
// --nats flag).
func RedactURLs(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = RedactURL(p)
	}
	return strings.Join(parts, ",")
}

func redact(s string) string { return RedactURL(s) }

// urlError is the cause of a failed url.Parse without the URL itself, which
// *url.Error repeats in full, credentials included.
func urlError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return ue.Err
	}
	return err
}
