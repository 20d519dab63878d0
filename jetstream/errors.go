package jetstream

import "errors"

var (
	// ErrNoServer means no NATS server answered at any of the URLs of the
	// first connection: nothing listens there, or it is unreachable.
	ErrNoServer = errors.New("no nats server")

	// ErrAuthentication means the server refused the credentials. The error
	// also wraps nats.go's cause, such as nats.ErrAuthorization.
	ErrAuthentication = errors.New("nats authentication failed")

	// ErrTLS means the TLS set-up or handshake with the server failed: an
	// untrusted server certificate, TLS wanted on one side only, or a bad
	// client certificate.
	ErrTLS = errors.New("nats tls handshake failed")

	// ErrOptions means the connection options are incomplete or name files
	// that cannot be read.
	ErrOptions = errors.New("invalid nats options")

	// ErrConfig means a provisioning [Config] does not validate.
	ErrConfig = errors.New("jetstream: invalid config")

	// ErrDrift means an existing stream, consumer or bucket differs from the
	// wanted config in a field JetStream cannot change in place. The error
	// names the object and the fields.
	ErrDrift = errors.New("config drift that cannot be updated in place")

	// ErrDowngrade means provisioning would lower a stream's or the
	// bucket's replicas or remove a stream's subjects, which it does only
	// when told so ([AllowDowngrade]).
	ErrDowngrade = errors.New("refused downgrade")

	// ErrMissing means a stream, consumer or bucket the process needs does
	// not exist and it was not allowed to create it ([ModeCheck]). The
	// error names the objects.
	ErrMissing = errors.New("missing jetstream objects")
)
