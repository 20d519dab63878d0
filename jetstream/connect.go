package jetstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// Reconnect backoff after a connection was lost: it doubles from
// reconnectMin up to reconnectMax, with up to a quarter of random jitter so
// that a fleet does not reconnect in lockstep after a server restart.
const (
	reconnectMin = 250 * time.Millisecond
	reconnectMax = 10 * time.Second
)

// Connect makes the first connection to NATS and returns it. The first
// connection fails fast, within about ConnectTimeout per server (or when ctx
// ends), with an error that says why: [ErrNoServer], [ErrAuthentication]
// (also wrapping nats.ErrAuthorization) or [ErrTLS]. Once connected, the
// connection reconnects forever with backoff and jitter, logging each
// disconnect and reconnect.
func Connect(ctx context.Context, o Options) (*nats.Conn, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	servers, err := o.servers()
	if err != nil {
		return nil, err
	}
	opts, err := o.natsOptions()
	if err != nil {
		return nil, err
	}
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(strings.Join(servers, ","), opts...)
		done <- result{nc, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, o.explain(servers, r.err)
		}
		return r.nc, nil
	case <-ctx.Done():
		// The dial is bounded by its timeout; close what it may still make.
		go func() {
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("connect to %s: %w", redactAll(servers), ctx.Err())
	}
}

// Reconnect makes a new connection after the last one closed for good: a
// server error nats.go does not come back from (an -ERR such as
// "maximum control line exceeded" ends a nats.go connection), where its
// own reconnects do not apply. It dials as [Connect] does, again and again
// with the reconnect backoff and jitter, until it connects or ctx ends;
// only unusable options end it early. lost counts the connections in a row
// that closed soon after they were made: from the second on, Reconnect
// first waits as long as that many failed dials would, so that a server
// that keeps closing the connection is not dialled in a tight loop.
func Reconnect(ctx context.Context, o Options, lost int) (*nats.Conn, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if lost > 1 {
		select {
		case <-time.After(reconnectDelay(lost - 1)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for attempt := 1; ; attempt++ {
		nc, err := Connect(ctx, o)
		if err == nil {
			log.Info("nats connected again", "url", redact(nc.ConnectedUrl()), "attempts", attempt)
			return nc, nil
		}
		if errors.Is(err, ErrOptions) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("reconnect: %w (last attempt: %w)", ctx.Err(), err)
		}
		d := reconnectDelay(attempt)
		log.Warn("nats: connecting again failed", "err", err, "retry_in", d.Round(time.Millisecond))
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (o Options) natsOptions() ([]nats.Option, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	name := o.Name
	if name == "" {
		name = "jetembed"
	}
	timeout := o.connectTimeout()
	opts := []nats.Option{
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(reconnectDelay),
		// The 2-minute default would leave a worker blind to a dead
		// connection for minutes while its jobs' ack waits run out.
		nats.PingInterval(20 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if nc.IsClosed() {
				return // our own Close, not an outage
			}
			log.Warn("nats disconnected", "url", redact(nc.ConnectedUrl()), "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", redact(nc.ConnectedUrl()), "reconnects", nc.Reconnects)
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			log.Debug("nats reconnect attempt failed", "err", err)
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); err != nil {
				log.Warn("nats connection closed", "err", err)
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			log.Warn("nats async error", "subject", subject, "err", err)
		}),
	}
	switch {
	case o.User != "":
		opts = append(opts, nats.UserInfo(o.User, o.Password))
	case o.Token != "":
		opts = append(opts, nats.Token(o.Token))
	case o.NKeyFile != "":
		opt, err := nats.NkeyOptionFromSeed(o.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: nkey seed file %s: %w", ErrOptions, o.NKeyFile, err)
		}
		opts = append(opts, opt)
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.TLS.enabled() {
		c, err := o.TLS.config()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(c))
	}
	if o.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(o.InboxPrefix))
	}
	return opts, nil
}

// New returns the JetStream API of nc, for [Provision] and the consumer;
// it lets the command wire things up without importing nats.go itself.
func New(nc *nats.Conn) (natsjs.JetStream, error) {
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream api: %w", err)
	}
	return js, nil
}

func (o Options) connectTimeout() time.Duration {
	if o.ConnectTimeout <= 0 {
		return DefaultConnectTimeout
	}
	return o.ConnectTimeout
}

// reconnectDelay is the wait before reconnect attempt n (1-based).
func reconnectDelay(attempts int) time.Duration {
	d := reconnectMax
	if attempts < 16 {
		d = min(reconnectMin<<max(attempts-1, 0), reconnectMax)
	}
	return d - time.Duration(rand.Int64N(int64(d)/4+1))
}

// explain turns a failed first connect into one of the package's errors.
// nats.go reports a refused connection only as "no servers available", so
// for that case each server is dialled once more to name the real cause.
func (o Options) explain(servers []string, err error) error {
	at := redactAll(servers)
	switch {
	case isAuthError(err):
		return fmt.Errorf("%w %s at %s: %w", ErrAuthentication, o.identity(), at, err)
	case isTLSError(err):
		return fmt.Errorf("%w with %s: %w%s", ErrTLS, at, err, tlsHint(err, o.TLS))
	case errors.Is(err, nats.ErrNoServers) && len(servers) > 1:
		// Each cause already names its server.
		return fmt.Errorf("%w: %w", ErrNoServer, diagnose(servers, o.ConnectTimeout))
	case errors.Is(err, nats.ErrNoServers):
		return fmt.Errorf("%w at %s: %w", ErrNoServer, at, diagnose(servers, o.ConnectTimeout))
	default:
		var netErr net.Error
		if (errors.As(err, &netErr) && netErr.Timeout()) || errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("%w at %s: no answer within %v: %w", ErrNoServer, at, o.connectTimeout(), err)
		}
		if errors.As(err, &netErr) {
			return fmt.Errorf("%w at %s: %w", ErrNoServer, at, err)
		}
		return fmt.Errorf("connect to %s: %w", at, err)
	}
}

func isAuthError(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired)
}

func isTLSError(err error) bool {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		record   tls.RecordHeaderError
		invalid  x509.CertificateInvalidError
		alert    tls.AlertError
	)
	return errors.Is(err, nats.ErrTLS) || errors.Is(err, nats.ErrSecureConnRequired) || errors.Is(err, nats.ErrSecureConnWanted) ||
		errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) ||
		errors.As(err, &record) || errors.As(err, &invalid) || errors.As(err, &alert) ||
		// A TLS alert from the server (e.g. "remote error: tls: certificate
		// required") has an unexported type; its text is all there is.
		strings.Contains(err.Error(), "tls: ")
}

// tlsHint says which option most likely fixes a TLS failure.
func tlsHint(err error, t TLSOptions) string {
	var unknown x509.UnknownAuthorityError
	switch {
	case errors.As(err, &unknown) && t.CAFile == "":
		return " (the server certificate is not signed by a trusted CA: set the CA file)"
	case errors.Is(err, nats.ErrSecureConnRequired):
		return " (the server requires TLS)"
	case t.CertFile == "" && (strings.Contains(err.Error(), "certificate required") ||
		strings.Contains(err.Error(), "closed by remote after TLS handshake")):
		return " (the server may require a client certificate: set the cert and key files)"
	case errors.Is(err, nats.ErrSecureConnWanted):
		return " (TLS is configured but the server does not offer it)"
	}
	return ""
}

// diagnose dials every server once to find out why none answered.
func diagnose(servers []string, timeout time.Duration) error {
	if timeout <= 0 || timeout > 2*time.Second {
		timeout = 2 * time.Second
	}
	var errs []error
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil {
			errs = append(errs, urlError(err))
			continue
		}
		host := u.Host
		if u.Port() == "" {
			host = net.JoinHostPort(u.Hostname(), "4222")
		}
		c, err := net.DialTimeout("tcp", host, timeout)
		if err != nil {
			if len(servers) == 1 {
				errs = append(errs, unwrapOp(err))
			} else {
				errs = append(errs, fmt.Errorf("%s: %w", redact(s), unwrapOp(err)))
			}
			continue
		}
		c.Close()
	}
	switch len(errs) {
	case 0:
		return nats.ErrNoServers
	case 1:
		return errs[0]
	}
	return joinErrors(errs)
}

// unwrapOp drops the "dial tcp 127.0.0.1:1234:" prefix the URL already says,
// keeping the cause ("connection refused") for errors.Is.
func unwrapOp(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	var sys *os.SyscallError
	if errors.As(err, &sys) && sys.Err != nil {
		err = sys.Err
	}
	return err
}

func redactAll(servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = redact(s)
	}
	return strings.Join(out, ",")
}

// joinedErrors is [errors.Join] on one line, so a log line stays one line.
type joinedErrors []error

func joinErrors(errs []error) error { return joinedErrors(errs) }

func (j joinedErrors) Error() string {
	parts := make([]string, len(j))
	for i, e := range j {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "; ")
}

func (j joinedErrors) Unwrap() []error { return j }
