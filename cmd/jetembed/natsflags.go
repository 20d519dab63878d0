package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jetembed/jetembed/jetstream"
	"github.com/jetembed/jetembed/schema"
)

// natsFlags are the connection flags every NATS-facing command shares.
type natsFlags struct {
	urls, name             *string
	inboxPrefix            *string
	user, password, token  *string
	nkey, creds            *string
	tlsCA, tlsCert, tlsKey *string
	connectTimeout         *time.Duration
}

func addNATSFlags(fs *flagSet) *natsFlags {
	return addNATSFlagsWith(fs, jetstream.DefaultURL, "NATS server URLs, comma separated (one cluster)")
}

// addNATSFlagsWith is addNATSFlags with another default and meaning of
// --nats: a command for which NATS is optional defaults to none.
func addNATSFlagsWith(fs *flagSet, urls, usage string) *natsFlags {
	return &natsFlags{
		urls:           fs.String("nats", urls, usage),
		user:           fs.String("nats-user", "", "NATS user name"),
		password:       fs.String("nats-password", "", "NATS password (prefer the environment variable to the flag)"),
		token:          fs.String("nats-token", "", "NATS token"),
		nkey:           fs.String("nats-nkey", "", "file with an NKey user seed"),
		creds:          fs.String("nats-creds", "", "NATS credentials file (JWT + seed)"),
		tlsCA:          fs.String("nats-tls-ca", "", "PEM file of the CA that signed the server certificate"),
		tlsCert:        fs.String("nats-tls-cert", "", "PEM client certificate for mutual TLS"),
		tlsKey:         fs.String("nats-tls-key", "", "PEM key of the client certificate"),
		name:           fs.String("nats-name", "jetembed", "connection name shown in the server's monitoring"),
		inboxPrefix:    fs.String("nats-inbox-prefix", "", "prefix of the connection's reply inboxes, which a tenant's permissions grant (empty: _INBOX_<tenant> with --tenant, else _INBOX)"),
		connectTimeout: fs.Duration("nats-connect-timeout", jetstream.DefaultConnectTimeout, "bound on the first connection to each server"),
	}
}

// options returns the connection options; log receives reconnect events.
func (f *natsFlags) options(log *slog.Logger) jetstream.Options {
	return jetstream.Options{
		URLs:           []string{*f.urls},
		User:           *f.user,
		Password:       *f.password,
		Token:          *f.token,
		NKeyFile:       *f.nkey,
		CredsFile:      *f.creds,
		TLS:            jetstream.TLSOptions{CAFile: *f.tlsCA, CertFile: *f.tlsCert, KeyFile: *f.tlsKey},
		Name:           *f.name,
		ConnectTimeout: *f.connectTimeout,
		InboxPrefix:    *f.inboxPrefix,
		Logger:         log,
	}
}

// addTenantFlag defines --tenant, on the commands that run as a producer.
func addTenantFlag(fs *flagSet) *string {
	return fs.String("tenant", "", "tenant to run as: the NATS user's name in the shipped permissions; jobs go to embed.jobs.<tenant>.>, results to embed.results.<tenant>.>, requests to embed.v1.embed.<tenant> (empty: no tenant, one shared space)")
}

// forTenant returns the connection options of a producer running as
// tenant: its inbox prefix defaults to _INBOX_<tenant>, the only inbox the
// tenant's permissions let it subscribe to.
func forTenant(o jetstream.Options, tenant string) jetstream.Options {
	if o.InboxPrefix == "" && tenant != "" {
		o.InboxPrefix = schema.DefaultTenantInboxPrefix + tenant
	}
	return o
}

// provisionFlags are the names, replicas and limits of the server-side
// objects. Every command that may create them has these; the consumer's
// tuning (ack wait, max deliver, backoff, max ack pending) is set only by
// `provision`: serve and dev read it from the server.
type provisionFlags struct {
	replicas                              *int
	jobs, results, dlq, consumer, engines *string
	blobs                                 *string
	jobsMaxAge, resultsMaxAge, dlqMaxAge  *time.Duration
	blobsMaxAge                           *time.Duration
	cache                                 *string
	cacheMaxAge                           *time.Duration
	cacheMaxBytes, cacheMaxValue          *int
	jobsMaxBytes, blobsMaxBytes           *int
	resultsMaxBytes, dlqMaxBytes          *int
	dlqMaxPerSubject                      *int
	dedupe                                *time.Duration
	usage                                 *string
	usageMaxAge, usageDedupe              *time.Duration
	usageMaxBytes                         *int
	noAdvisories                          *bool
	tuning                                *tuningFlags // nil without tuning flags
}

// tuningFlags are the durable consumer's settings, on `provision` only.
type tuningFlags struct {
	ackWait                   *time.Duration
	maxDeliver, maxAckPending *int
	backoff                   *string
	perTenant                 *bool
}

// addProvisionFlags defines the object flags on fs, and the consumer's
// tuning flags when tuning is set.
func addProvisionFlags(fs *flagSet, tuning bool) *provisionFlags {
	d := jetstream.DefaultConfig()
	f := &provisionFlags{
		replicas:      fs.Int("replicas", d.Replicas, "replicas of the streams and the KV bucket (1, 3 or 5)"),
		jobs:          fs.String("jobs-stream", d.Jobs.Name, "name of the jobs work-queue stream"),
		results:       fs.String("results-stream", d.Results.Name, "name of the results stream"),
		dlq:           fs.String("dlq-stream", d.DLQ.Name, "name of the dead-letter stream"),
		consumer:      fs.String("consumer", d.Consumer.Name, "name of the durable pull consumer"),
		engines:       fs.String("engines-bucket", d.Engines.Name, "name of the engine-shapes KV bucket"),
		blobs:         fs.String("blobs-bucket", d.Blobs.Name, "name of the Object Store bucket of results over the server's max payload"),
		blobsMaxAge:   fs.Duration("blobs-max-age", d.Blobs.TTL, "keep result blobs this long (0: forever)"),
		blobsMaxBytes: fs.Int("blobs-max-bytes", int(d.Blobs.MaxBytes), "size cap of the blobs bucket in bytes; a full bucket refuses new blobs, whose jobs are retried then dead-lettered (-1: none)"),
		cache:         fs.String("cache-bucket", d.Cache.Name, "name of the KV bucket of the fleet's result cache (serve --cache kv)"),
		cacheMaxAge:   fs.Duration("cache-max-age", d.Cache.TTL, "keep a cached result this long (0: until the byte cap evicts it; else at least 2m)"),
		cacheMaxBytes: fs.Int("cache-max-bytes", int(d.Cache.MaxBytes), "size cap of the cache bucket in bytes; when full the oldest entries are dropped (-1: none)"),
		cacheMaxValue: fs.Int("cache-max-value-bytes", d.Cache.MaxValueBytes, "largest cached result in bytes; a larger one is computed every time (-1: the server's max payload)"),
		jobsMaxAge:    fs.Duration("jobs-max-age", d.Jobs.MaxAge, "drop queued jobs older than this (0: never)"),
		jobsMaxBytes:  fs.Int("jobs-max-bytes", int(d.Jobs.MaxBytes), "size cap of the jobs stream in bytes; a full queue refuses new jobs (-1: none)"),
		resultsMaxAge: fs.Duration("results-max-age", d.Results.MaxAge, "keep results this long"),
		resultsMaxBytes: fs.Int("results-max-bytes", int(d.Results.MaxBytes),
			"size cap of the results stream in bytes; when full the oldest results are dropped (-1: none)"),
		dlqMaxAge: fs.Duration("dlq-max-age", d.DLQ.MaxAge, "keep dead letters this long"),
		dlqMaxBytes: fs.Int("dlq-max-bytes", int(d.DLQ.MaxBytes),
			"size cap of the dead-letter stream in bytes; when full the oldest letters are dropped (-1: none)"),
		dlqMaxPerSubject: fs.Int("dlq-max-per-subject", int(d.DLQ.MaxMsgsPerSubject),
			"dead letters kept per tenant and code (embed.dlq.<code>.<tenant>); a tenant's newer letters drop its own oldest, never another's (-1: none)"),
		dedupe:      fs.Duration("dedupe-window", d.Jobs.Duplicates, "window in which a repeated job or result id is dropped"),
		usage:       fs.String("usage-stream", d.Usage.Name, "name of the usage stream: one usage event per job, read by jetembed usage (empty: none; usage is then in /metrics only)"),
		usageMaxAge: fs.Duration("usage-max-age", d.Usage.MaxAge, "keep usage events this long (0: forever)"),
		usageMaxBytes: fs.Int("usage-max-bytes", int(d.Usage.MaxBytes),
			"size cap of the usage stream in bytes, about 250 bytes a job; when full the oldest events are dropped (-1: none)"),
		usageDedupe:  fs.Duration("usage-dedupe-window", d.Usage.Duplicates, "window in which a redelivered job's second usage event is dropped: keep it above the consumer's ack wait plus its backoff, or a job redelivered later is counted twice"),
		noAdvisories: fs.Bool("no-dlq-advisories", false, "do not capture max-delivery advisories in the dead-letter stream"),
	}
	if tuning {
		f.tuning = &tuningFlags{
			ackWait:       fs.Duration("ack-wait", d.Consumer.AckWait, "redeliver a job not acknowledged within this time"),
			maxDeliver:    fs.Int("max-deliver", d.Consumer.MaxDeliver, "deliveries of a job before it is given up (-1: unlimited)"),
			maxAckPending: fs.Int("max-ack-pending", d.Consumer.MaxAckPending, "jobs in flight over the whole fleet"),
			backoff:       fs.String("backoff", "", `redelivery delays after ack timeouts, comma separated; the first must equal --ack-wait ("": doubling from --ack-wait, "none": no backoff)`),
			perTenant:     fs.Bool("per-tenant", false, "fair share: the durable becomes the template of one consumer a tenant (<consumer>_<tenant>, filtered on embed.jobs.<tenant>.>, each with --max-ack-pending), which the members create, pull from in turn and retire, so one tenant's backlog is never pulled ahead of another's (false: one consumer of every job; switching back deletes the tenants' consumers)"),
		}
	}
	return f
}

// config returns the validated provisioning config; a bad value is a usage
// error. Without tuning flags the consumer's settings are the defaults
// (what serve --provision=create and dev create a missing consumer with).
func (f *provisionFlags) config() (jetstream.Config, error) {
	c := jetstream.DefaultConfig()
	c.Replicas = *f.replicas
	c.Jobs.Name, c.Results.Name, c.DLQ.Name = *f.jobs, *f.results, *f.dlq
	c.Jobs.MaxAge, c.Results.MaxAge, c.DLQ.MaxAge = *f.jobsMaxAge, *f.resultsMaxAge, *f.dlqMaxAge
	c.Jobs.MaxBytes = int64(*f.jobsMaxBytes)
	c.Results.MaxBytes, c.DLQ.MaxBytes = int64(*f.resultsMaxBytes), int64(*f.dlqMaxBytes)
	c.DLQ.MaxMsgsPerSubject = int64(*f.dlqMaxPerSubject)
	c.Jobs.Duplicates, c.Results.Duplicates = *f.dedupe, *f.dedupe
	c.CaptureMaxDeliveries = !*f.noAdvisories
	c.Usage.Name, c.Usage.MaxAge, c.Usage.MaxBytes, c.Usage.Duplicates = *f.usage, *f.usageMaxAge, int64(*f.usageMaxBytes), *f.usageDedupe
	c.Consumer.Name = *f.consumer
	c.Engines.Name = *f.engines
	c.Blobs.Name, c.Blobs.TTL, c.Blobs.MaxBytes = *f.blobs, *f.blobsMaxAge, int64(*f.blobsMaxBytes)
	c.Cache = jetstream.CacheSpec{Name: *f.cache, TTL: *f.cacheMaxAge, MaxBytes: int64(*f.cacheMaxBytes), MaxValueBytes: *f.cacheMaxValue}
	if t := f.tuning; t != nil {
		c.Consumer.AckWait = *t.ackWait
		c.Consumer.MaxDeliver = *t.maxDeliver
		c.Consumer.MaxAckPending = *t.maxAckPending
		c.Consumer.PerTenant = *t.perTenant
		backoff, err := t.backoffs(c.Consumer.AckWait, c.Consumer.MaxDeliver)
		if err != nil {
			return c, err
		}
		c.Consumer.BackOff = backoff
	}
	if err := c.Validate(); err != nil {
		return c, fmt.Errorf("%w: %w", errUsage, err)
	}
	return c, nil
}

// backoffs parses --backoff.
func (t *tuningFlags) backoffs(ackWait time.Duration, maxDeliver int) ([]time.Duration, error) {
	var out []time.Duration
	switch b := strings.TrimSpace(*t.backoff); b {
	case "":
		n := 4
		if maxDeliver > 0 {
			n = min(n, maxDeliver-1)
		}
		out = jetstream.ExponentialBackOff(ackWait, n)
	case "none":
	default:
		for _, s := range strings.Split(b, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return nil, fmt.Errorf("%w: --backoff %q: %v", errUsage, b, err)
			}
			out = append(out, d)
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
