package client

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nuid"

	"github.com/jetembed/jetembed/schema"
)

// Defaults of the deployment (jetembed provision's names).
const (
	DefaultEndpoint       = schema.SubjectEmbed
	DefaultJobsSubject    = schema.SubjectJobs
	DefaultResultsSubject = schema.SubjectResults
	DefaultResultsStream  = schema.StreamResults
	DefaultBlobsBucket    = schema.BucketBlobs
	// DefaultMaxBlobBytes bounds the result blob a client fetches.
	DefaultMaxBlobBytes = 256 << 20
)

// Option tunes a [Client].
type Option func(*options)

type options struct {
	jobsPrefix    string // "embed.jobs"
	resultsPrefix string // "embed.results"
	resultsStream string
	blobsBucket   string
	maxBlobBytes  int64
	// resultsConsumers is how many results consumers of the tenant's
	// names [Client.Results] tries.
	resultsConsumers int
	endpoint         string
	tenant           string
	run              string
	enc              schema.Encoding
	outputs          []schema.Output

	// rerankEndpoint and tokenizeEndpoint are the service's other
	// endpoints (embed.v1.rerank, embed.v1.tokenize).
	rerankEndpoint, tokenizeEndpoint string
}

func defaultOptions() options {
	o := options{endpoint: DefaultEndpoint, rerankEndpoint: DefaultRerankEndpoint, tokenizeEndpoint: DefaultTokenizeEndpoint,
		run: nuid.Next(), blobsBucket: DefaultBlobsBucket, maxBlobBytes: DefaultMaxBlobBytes,
		resultsConsumers: schema.DefaultResultsConsumers}
	o.streams(DefaultJobsSubject, DefaultResultsSubject, DefaultResultsStream)
	return o
}

// streams takes the subject prefixes (the stream subjects without their
// trailing wildcard) and the results stream's name.
func (o *options) streams(jobsSubject, resultsSubject, resultsStream string) {
	prefix := func(subject string) string {
		return strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(subject, ">"), "*"), ".")
	}
	o.jobsPrefix = prefix(jobsSubject)
	o.resultsPrefix = prefix(resultsSubject)
	o.resultsStream = resultsStream
}

// WithRun names the run: jobs go to embed.jobs.[<tenant>.]<run>.<job id>
// and their results to embed.results.[<tenant>.]<run>.<job id>, where
// [Client.Results] finds them. The default is a random id, unique to the
// client. run becomes one subject token: characters other than letters,
// digits, '-' and '_' become '_'.
func WithRun(run string) Option {
	return func(o *options) { o.run = Token(run) }
}

// WithTenant sets the tenant: the identity the NATS server authenticates
// the connection as, whose permissions allow jobs only under
// embed.jobs.<tenant>.>, results only under embed.results.<tenant>.>,
// requests only to embed.v1.embed.<tenant> and replies only to the inbox
// prefix _INBOX_<tenant> (set it on the connection with
// nats.CustomInboxPrefix). Without a tenant (one producer, or a shared
// deployment) jobs go to embed.jobs.<run>.<id>, which the fleet reads as
// tenant <run>. The tenant must be one subject token; [New] refuses
// another.
func WithTenant(tenant string) Option {
	return func(o *options) { o.tenant = tenant }
}

// WithJSON sends jobs as JSON instead of msgpack; results come back in the
// job's encoding.
func WithJSON() Option {
	return func(o *options) { o.enc = schema.EncodingJSON }
}

// WithOutputs sets the outputs of the jobs [Client.Embed] makes (default
// dense).
func WithOutputs(outputs ...schema.Output) Option {
	return func(o *options) { o.outputs = outputs }
}

// WithEndpoint sets the subject of the request-reply endpoint (default
// [DefaultEndpoint]).
func WithEndpoint(subject string) Option {
	return func(o *options) { o.endpoint = subject }
}

// Names are the server-side names a client uses; an empty field keeps its
// default.
type Names struct {
	// JobsSubject and ResultsSubject are the subjects of the jobs and
	// results streams (embed.jobs.>, embed.results.>).
	JobsSubject, ResultsSubject string
	// ResultsStream is the results stream (EMBED_RESULTS).
	ResultsStream string
	// BlobsBucket is the Object Store bucket of large results (EMBED_BLOBS).
	BlobsBucket string
	// Endpoint is the request-reply subject (embed.v1.embed).
	Endpoint string
	// RerankEndpoint and TokenizeEndpoint are the subjects of the rerank
	// and tokenize endpoints (embed.v1.rerank, embed.v1.tokenize).
	RerankEndpoint, TokenizeEndpoint string
}

// WithNames sets the subjects, stream and bucket names of deployments that
// renamed them.
func WithNames(n Names) Option {
	return func(o *options) {
		set := func(dst *string, v string) {
			if v != "" {
				*dst = v
			}
		}
		js, rs, st := o.jobsPrefix+".>", o.resultsPrefix+".>", o.resultsStream
		set(&js, n.JobsSubject)
		set(&rs, n.ResultsSubject)
		set(&st, n.ResultsStream)
		o.streams(js, rs, st)
		set(&o.blobsBucket, n.BlobsBucket)
		set(&o.endpoint, n.Endpoint)
		set(&o.rerankEndpoint, n.RerankEndpoint)
		set(&o.tokenizeEndpoint, n.TokenizeEndpoint)
	}
}

// WithResultsConsumers is how many results consumers the tenant may have
// at once (default [schema.DefaultResultsConsumers], what the shipped
// deploy configuration grants): [Client.Results] reads through the first
// of the tenant's consumer names ([schema.ResultsConsumerName]) not in
// use, and fails with [ErrResultsConsumers] when all are.
func WithResultsConsumers(n int) Option {
	return func(o *options) { o.resultsConsumers = max(n, 1) }
}

// WithMaxBlobBytes bounds the result blob a client fetches (default 256
// MiB); a larger one is an error wrapping [ErrBlob].
func WithMaxBlobBytes(n int64) Option {
	return func(o *options) { o.maxBlobBytes = n }
}

// validToken reports whether s is one subject token: no dots, wildcards,
// whitespace or control characters.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return false
		}
	}
	return utf8.ValidString(s)
}

// Token makes s usable as one subject token: anything but letters, digits,
// '-' and '_' becomes '_' (an empty s becomes "_").
func Token(s string) string {
	if s == "" {
		return "_"
	}
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
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
