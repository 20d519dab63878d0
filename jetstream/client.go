package jetstream

import (
	"github.com/nats-io/nats.go"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

// The producer client lives in package client (nats.go and schema only);
// these names keep the server-side code and its tests on one spelling.
type (
	// Client is [client.Client].
	Client = client.Client
	// ClientOption is [client.Option].
	ClientOption = client.Option
	// StoredResult is [client.StoredResult].
	StoredResult = client.StoredResult
	// ResultsOption is [client.ResultsOption].
	ResultsOption = client.ResultsOption
)

var (
	// ErrNoService is [client.ErrNoService].
	ErrNoService = client.ErrNoService
	// ErrBadResult is [client.ErrBadResult].
	ErrBadResult = client.ErrBadResult
	// ErrForeignResult is [client.ErrForeignResult].
	ErrForeignResult = client.ErrForeignResult
)

// NewClient is [client.New].
func NewClient(nc *nats.Conn, opts ...ClientOption) (*Client, error) { return client.New(nc, opts...) }

// WithRun is [client.WithRun].
func WithRun(run string) ClientOption { return client.WithRun(run) }

// WithTenant is [client.WithTenant].
func WithTenant(tenant string) ClientOption { return client.WithTenant(tenant) }

// WithJSON is [client.WithJSON].
func WithJSON() ClientOption { return client.WithJSON() }

// WithOutputs is [client.WithOutputs].
func WithOutputs(outputs ...schema.Output) ClientOption { return client.WithOutputs(outputs...) }

// AfterSequence is [client.AfterSequence].
func AfterSequence(seq uint64) ResultsOption { return client.AfterSequence(seq) }

// UntilCaughtUp is [client.UntilCaughtUp].
func UntilCaughtUp() ResultsOption { return client.UntilCaughtUp() }

// WithStreams names the jobs and results subjects, the results stream and
// the blobs bucket of cfg, for deployments that renamed them.
func WithStreams(cfg Config) ClientOption {
	n := client.Names{ResultsStream: cfg.Results.Name, BlobsBucket: cfg.Blobs.Name}
	if len(cfg.Jobs.Subjects) > 0 {
		n.JobsSubject = cfg.Jobs.Subjects[0]
	}
	if len(cfg.Results.Subjects) > 0 {
		n.ResultsSubject = cfg.Results.Subjects[0]
	}
	return client.WithNames(n)
}
