package jetstream

import (
	"strings"

	"github.com/nats-io/nuid"

	"github.com/jetembed/jetembed/schema"
)

// ClientOption tunes a [Client].
type ClientOption func(*clientOptions)

type clientOptions struct {
	jobsPrefix    string // "embed.jobs"
	resultsPrefix string // "embed.results"
	resultsStream string
	endpoint      string
	run           string
	enc           schema.Encoding
	outputs       []schema.Output
}

func defaultClientOptions() clientOptions {
	cfg := DefaultConfig()
	o := clientOptions{endpoint: EndpointSubject, run: nuid.Next()}
	o.streams(cfg)
	return o
}

// streams takes the subject prefixes and the results stream's name from
// cfg: the first subject of each stream without its trailing wildcard.
func (o *clientOptions) streams(cfg Config) {
	prefix := func(subjects []string) string {
		if len(subjects) == 0 {
			return ""
		}
		return strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(subjects[0], ">"), "*"), ".")
	}
	o.jobsPrefix = prefix(cfg.Jobs.Subjects)
	o.resultsPrefix = prefix(cfg.Results.Subjects)
	o.resultsStream = cfg.Results.Name
}

// WithRun names the run: jobs go to embed.jobs.<run> and their results to
// embed.results.<run>.<job id>, where [Client.Results] finds them. The
// default is a random id, unique to the client. run becomes one subject
// token: characters other than letters, digits, '-' and '_' become '_'.
func WithRun(run string) ClientOption {
	return func(o *clientOptions) { o.run = subjectToken(run) }
}

// WithJSON sends jobs as JSON instead of msgpack; results come back in the
// job's encoding.
func WithJSON() ClientOption {
	return func(o *clientOptions) { o.enc = schema.EncodingJSON }
}

// WithOutputs sets the outputs of the jobs [Client.Embed] makes (default
// dense).
func WithOutputs(outputs ...schema.Output) ClientOption {
	return func(o *clientOptions) { o.outputs = outputs }
}

// WithEndpoint sets the subject of the request-reply endpoint (default
// [EndpointSubject]).
func WithEndpoint(subject string) ClientOption {
	return func(o *clientOptions) { o.endpoint = subject }
}

// WithStreams takes the jobs and results subjects and the results stream's
// name from cfg, for deployments that renamed them.
func WithStreams(cfg Config) ClientOption {
	return func(o *clientOptions) { o.streams(cfg) }
}

// ResultsOption tunes [Client.Results].
type ResultsOption func(*resultsOptions)

type resultsOptions struct {
	untilCaughtUp bool
	after         uint64
}

// AfterSequence starts after stream sequence seq (a [StoredResult.Sequence]
// already read), instead of at the run's first result.
func AfterSequence(seq uint64) ResultsOption {
	return func(o *resultsOptions) { o.after = seq }
}

// UntilCaughtUp ends the iteration once every result stored when it began
// was yielded, instead of waiting for new ones: how a resumed bulk run
// learns which jobs are already done.
func UntilCaughtUp() ResultsOption {
	return func(o *resultsOptions) { o.untilCaughtUp = true }
}
