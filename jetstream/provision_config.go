package jetstream

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetembed/jetembed/client"
	"github.com/jetembed/jetembed/schema"
)

// StreamSpec is the wanted shape of one stream. Retention, storage and
// discard policy are fixed by the stream's role and are not configurable.
type StreamSpec struct {
	// Name is the stream name.
	Name string
	// Subjects are the subjects the stream captures.
	Subjects []string
	// MaxAge drops messages older than this; 0 keeps them forever.
	MaxAge time.Duration
	// MaxBytes caps the stream's size; -1 (or 0) is unlimited.
	MaxBytes int64
	// Duplicates is the window in which a repeated Nats-Msg-Id is dropped.
	Duplicates time.Duration
	// MaxMsgsPerSubject caps the messages of each subject (the oldest of
	// that subject go first); 0 is unlimited. On the dead-letter stream,
	// whose subjects are <prefix>.<code>.<tenant>, it is the cap per
	// tenant and code: one tenant's junk evicts only its own letters.
	MaxMsgsPerSubject int64
}

// ConsumerSpec is the wanted shape of the durable pull consumer the fleet
// shares.
type ConsumerSpec struct {
	// Name is the durable name.
	Name string
	// AckWait is how long a delivery may stay unacknowledged before it is
	// redelivered; long jobs extend it with InProgress.
	AckWait time.Duration
	// MaxDeliver is how often a job is delivered before it is given up
	// (and a max-deliveries advisory is sent).
	MaxDeliver int
	// BackOff are the redelivery delays after an ack timeout. The server
	// uses BackOff[0] as the ack wait, so it must equal AckWait; it may have
	// at most MaxDeliver entries.
	BackOff []time.Duration
	// MaxAckPending is the number of jobs in flight over the whole fleet:
	// the flow-control knob. With PerTenant, it is each tenant's.
	MaxAckPending int
	// PerTenant makes the durable a template rather than the consumer of
	// every job: filtered on the jobs subject's bare prefix (embed.jobs),
	// which no job is published on, it holds the settings from which the
	// members make one consumer a tenant (<Name>_<tenant>, filtered on
	// embed.jobs.<tenant> and embed.jobs.<tenant>.>), so that one tenant's
	// backlog is never pulled ahead of another's. See pull_tenants.go.
	PerTenant bool
}

// BucketSpec is the wanted shape of the engines KV bucket.
//
// Shape keys live forever (no bucket TTL); lock keys expire by themselves
// through per-key TTLs (KeyTTL on create), which need the bucket's
// LimitMarkerTTL and nats-server 2.11 or later. When a lock key expires the
// server leaves a delete marker for LimitMarkerTTL, so peers watching the
// bucket see the lock released instead of waiting for it.
type BucketSpec struct {
	// Name is the bucket name.
	Name string
	// History is how many values a key keeps.
	History int
	// LimitMarkerTTL is how long the marker of an expired key stays.
	LimitMarkerTTL time.Duration
}

// BlobsSpec is the wanted shape of the Object Store bucket that holds
// results too large for one message.
type BlobsSpec struct {
	// Name is the bucket name.
	Name string
	// TTL drops a blob this long after it was stored; 0 keeps it forever.
	TTL time.Duration
	// MaxBytes caps the bucket's size; -1 (or 0) is unlimited. A full
	// bucket refuses new blobs: their jobs are retried, then dead-lettered
	// publish_failed.
	MaxBytes int64
}

// CacheSpec is the wanted shape of the KV bucket of the fleet's cache of
// per-text results (serve --cache kv). A full bucket drops its oldest
// entries (its stream discards old), so it keeps taking new ones.
type CacheSpec struct {
	// Name is the bucket name; empty: no cache bucket (provision leaves it
	// alone, serve checks it only with --cache kv).
	Name string
	// TTL drops an entry this long after it was stored: 0 keeps entries
	// until the byte cap evicts them, else at least 2 minutes (the
	// bucket's duplicate window).
	TTL time.Duration
	// MaxBytes caps the bucket's size; -1 (or 0) is unlimited.
	MaxBytes int64
	// MaxValueBytes caps one entry: a text's result over it is not stored
	// (it is computed every time). -1 (or 0) is the server's max payload.
	MaxValueBytes int
}

// Config is everything [Provision] creates: three streams, the durable pull
// consumer on the jobs stream, the engines KV bucket and the blobs Object
// Store bucket.
type Config struct {
	// Replicas is the replica count of the streams and the bucket (the
	// consumer follows its stream): 1, or 3 or 5 in a cluster.
	Replicas int

	// Jobs is the work queue (WorkQueue retention, file storage, discard
	// new: a full queue refuses new jobs rather than dropping old ones).
	Jobs StreamSpec
	// Results holds results for async bulk work (limits retention, file
	// storage); results are deduplicated by job id through Duplicates.
	Results StreamSpec
	// DLQ holds terminated jobs with their reason (limits retention).
	DLQ StreamSpec
	// Usage holds one usage event per job settled for good (limits
	// retention, discard old: a full store drops the oldest events rather
	// than refuse, and so stall, the jobs it meters); its Duplicates
	// window drops a redelivered job's second event, so it must outlast a
	// job's redeliveries (AckWait and BackOff). An empty Name provisions
	// none (and serve meters to /metrics only).
	Usage StreamSpec
	// CaptureMaxDeliveries also stores the consumer's max-deliveries
	// advisories in the DLQ, so operators see which jobs gave up.
	CaptureMaxDeliveries bool

	// Consumer is the durable pull consumer on Jobs.
	Consumer ConsumerSpec

	// Engines is the KV bucket that propagates compiled engine shapes.
	Engines BucketSpec
	// Blobs is the Object Store bucket of oversized results.
	Blobs BlobsSpec
	// Cache is the KV bucket of the fleet's cache of per-text results.
	Cache CacheSpec
}

// Default byte caps of the streams and the blobs bucket: no producer may
// fill the servers' storage through any of them (a full store refuses
// every stream's writes, every tenant's). nats-server reserves each cap
// against its max_file_store (on every server holding a replica): the
// defaults reserve 8 GiB; set smaller ones for a smaller store.
const (
	// DefaultJobsMaxBytes: a full queue refuses new jobs (DiscardNew),
	// never drops queued ones.
	DefaultJobsMaxBytes    = 1 << 30
	DefaultResultsMaxBytes = 4 << 30
	DefaultDLQMaxBytes     = 1 << 30
	// DefaultDLQMaxPerSubject is the default cap of dead letters per
	// tenant and code (EMBED_DLQ's MaxMsgsPerSubject): a tenant flooding
	// one code keeps its newest 10,000 there and evicts no one else's, as
	// long as the letters of every tenant fit DefaultDLQMaxBytes (the
	// stream's own cap, which drops the oldest letters of all).
	DefaultDLQMaxPerSubject = 10_000
	// DefaultBlobsMaxBytes: a full bucket refuses new blobs, whose jobs
	// are retried, then dead-lettered publish_failed.
	DefaultBlobsMaxBytes = 2 << 30
	// DefaultUsageMaxBytes holds about four million jobs' usage events
	// (some 250 bytes each).
	DefaultUsageMaxBytes = 1 << 30
	// DefaultCacheMaxBytes caps the result cache: about 200,000 dense
	// and sparse results of BGE-M3 (4 to 5 KiB each); when full the
	// oldest entries go.
	DefaultCacheMaxBytes = 1 << 30
	// DefaultCacheMaxValueBytes is nats-server's default max payload: a
	// result with the ColBERT vectors of more than about 250 tokens is not
	// cached.
	DefaultCacheMaxValueBytes = 1 << 20
	// DefaultCacheTTL keeps a cached result a week: a weekly re-index
	// finds the week's texts.
	DefaultCacheTTL = 7 * 24 * time.Hour
)

// DefaultConfig returns the names of package schema (EMBED_JOBS,
// EMBED_RESULTS, EMBED_DLQ, the consumer "embedder", the buckets
// EMBED_ENGINES, EMBED_BLOBS and EMBED_CACHE) and the limits of the design, with one
// replica.
func DefaultConfig() Config {
	const day = 24 * time.Hour
	ackWait := 60 * time.Second
	return Config{
		Replicas: 1,
		Jobs: StreamSpec{
			Name: schema.StreamJobs, Subjects: []string{schema.SubjectJobs},
			MaxAge: 7 * day, MaxBytes: DefaultJobsMaxBytes, Duplicates: 10 * time.Minute,
		},
		Results: StreamSpec{
			Name: schema.StreamResults, Subjects: []string{schema.SubjectResults},
			MaxAge: day, MaxBytes: DefaultResultsMaxBytes, Duplicates: 10 * time.Minute,
		},
		DLQ: StreamSpec{
			Name: schema.StreamDLQ, Subjects: []string{schema.SubjectDLQ},
			MaxAge: 14 * day, MaxBytes: DefaultDLQMaxBytes, Duplicates: 2 * time.Minute,
			MaxMsgsPerSubject: DefaultDLQMaxPerSubject,
		},
		// A billing month and a few days to bill it; the duplicate window
		// outlasts the consumer's redeliveries (60+120+240+480 s).
		Usage: StreamSpec{
			Name: schema.StreamUsage, Subjects: []string{schema.SubjectUsage},
			MaxAge: 35 * day, MaxBytes: DefaultUsageMaxBytes, Duplicates: 20 * time.Minute,
		},
		CaptureMaxDeliveries: true,
		Consumer: ConsumerSpec{
			Name:          schema.ConsumerName,
			AckWait:       ackWait,
			MaxDeliver:    5,
			BackOff:       ExponentialBackOff(ackWait, 4),
			MaxAckPending: 1024,
		},
		Engines: BucketSpec{Name: schema.BucketEngines, History: 1, LimitMarkerTTL: 5 * time.Minute},
		// Kept as long as the results that name them.
		Blobs: BlobsSpec{Name: schema.BucketBlobs, TTL: day, MaxBytes: DefaultBlobsMaxBytes},
		Cache: CacheSpec{Name: schema.BucketCache, TTL: DefaultCacheTTL, MaxBytes: DefaultCacheMaxBytes,
			MaxValueBytes: DefaultCacheMaxValueBytes},
	}
}

// ExponentialBackOff returns n delays starting at first and doubling, for
// [ConsumerSpec.BackOff].
func ExponentialBackOff(first time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = first << i
	}
	return out
}

// MaxDeliveriesSubject is the advisory subject the server publishes on when
// the consumer gives up a job after MaxDeliver deliveries.
// With per-tenant consumers it is every consumer's of the jobs stream.
func (c Config) MaxDeliveriesSubject() string {
	if c.Consumer.PerTenant {
		return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + c.Jobs.Name + ".*"
	}
	return "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + c.Jobs.Name + "." + c.Consumer.Name
}

// Validate reports every problem of c at once, wrapped in
// [ErrConfig].
func (c Config) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Replicas < 1 || c.Replicas > 5 {
		add("replicas %d: want 1 to 5", c.Replicas)
	}
	seen := map[string]string{}
	type role struct {
		role string
		spec StreamSpec
	}
	streams := []role{{"jobs", c.Jobs}, {"results", c.Results}, {"dlq", c.DLQ}}
	if c.Usage.Name != "" {
		streams = append(streams, role{"usage", c.Usage})
	}
	for _, s := range streams {
		if err := validName(s.spec.Name); err != nil {
			add("%s stream: %w", s.role, err)
		} else if other, dup := seen[s.spec.Name]; dup {
			add("%s stream: name %q is also the %s stream", s.role, s.spec.Name, other)
		}
		seen[s.spec.Name] = s.role
		if len(s.spec.Subjects) == 0 {
			add("%s stream %s: no subjects", s.role, s.spec.Name)
		}
		for _, subj := range s.spec.Subjects {
			if subj == "" || strings.ContainsAny(subj, " \t\r\n") || strings.HasPrefix(subj, ".") || strings.HasSuffix(subj, ".") {
				add("%s stream %s: bad subject %q", s.role, s.spec.Name, subj)
			}
		}
		if s.spec.MaxAge < 0 || s.spec.Duplicates < 0 {
			add("%s stream %s: negative max age or duplicate window", s.role, s.spec.Name)
		}
		if s.spec.MaxAge > 0 && s.spec.Duplicates > s.spec.MaxAge {
			add("%s stream %s: duplicate window %v exceeds max age %v", s.role, s.spec.Name, s.spec.Duplicates, s.spec.MaxAge)
		}
		if s.spec.MaxBytes < -1 {
			add("%s stream %s: max bytes %d: want -1 (unlimited) or more", s.role, s.spec.Name, s.spec.MaxBytes)
		}
	}
	c.Consumer.validate(add)
	if c.Consumer.PerTenant {
		if _, err := c.jobsPrefix(); err != nil {
			add("consumer %s: %v", c.Consumer.Name, err)
		}
	}
	if err := validName(c.Engines.Name); err != nil {
		add("engines bucket: %w", err)
	}
	if c.Engines.History < 1 || c.Engines.History > 64 {
		add("engines bucket %s: history %d: want 1 to 64", c.Engines.Name, c.Engines.History)
	}
	if c.Engines.LimitMarkerTTL < time.Second {
		add("engines bucket %s: limit marker ttl %v: want >= 1s (lock keys need per-key TTLs)", c.Engines.Name, c.Engines.LimitMarkerTTL)
	}
	if err := validName(c.Blobs.Name); err != nil {
		add("blobs bucket: %w", err)
	}
	if c.Blobs.MaxBytes < -1 {
		add("blobs bucket %s: max bytes %d: want -1 (unlimited) or more", c.Blobs.Name, c.Blobs.MaxBytes)
	}
	if c.Blobs.TTL < 0 {
		add("blobs bucket %s: negative ttl %v", c.Blobs.Name, c.Blobs.TTL)
	}
	if cs := c.Cache; cs.Name != "" {
		if err := validName(cs.Name); err != nil {
			add("cache bucket: %w", err)
		}
		if cs.TTL < 0 || cs.TTL > 0 && cs.TTL < 2*time.Minute {
			add("cache bucket %s: ttl %v: want 0 (none) or at least 2m", cs.Name, cs.TTL)
		}
		if cs.MaxBytes < -1 {
			add("cache bucket %s: max bytes %d: want -1 (unlimited) or more", cs.Name, cs.MaxBytes)
		}
		if cs.MaxValueBytes < -1 || cs.MaxValueBytes > 64<<20 {
			add("cache bucket %s: max value bytes %d: want -1 (the server's max payload) up to 64 MiB", cs.Name, cs.MaxValueBytes)
		}
		for _, other := range []string{c.Engines.Name, c.Blobs.Name} {
			if cs.Name == other {
				add("cache bucket: name %q is also another bucket's", cs.Name)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}

// validate adds what is wrong with the consumer's settings.
func (cs ConsumerSpec) validate(add func(format string, args ...any)) {
	if err := validName(cs.Name); err != nil {
		add("consumer: %w", err)
	}
	if cs.AckWait <= 0 {
		add("consumer %s: ack wait %v: want > 0", cs.Name, cs.AckWait)
	}
	if cs.MaxDeliver < 1 && cs.MaxDeliver != -1 {
		add("consumer %s: max deliver %d: want >= 1, or -1 for unlimited", cs.Name, cs.MaxDeliver)
	}
	if len(cs.BackOff) > 0 {
		if cs.BackOff[0] != cs.AckWait {
			add("consumer %s: backoff[0] %v must equal ack wait %v (the server uses it as the ack wait)", cs.Name, cs.BackOff[0], cs.AckWait)
		}
		if cs.MaxDeliver != -1 && len(cs.BackOff) > cs.MaxDeliver {
			add("consumer %s: %d backoff delays exceed max deliver %d", cs.Name, len(cs.BackOff), cs.MaxDeliver)
		}
		for _, d := range cs.BackOff {
			if d <= 0 {
				add("consumer %s: backoff delay %v: want > 0", cs.Name, d)
				break
			}
		}
	}
	if cs.MaxAckPending < 1 {
		add("consumer %s: max ack pending %d: want >= 1", cs.Name, cs.MaxAckPending)
	}
}

// validName checks a stream, consumer or bucket name: JetStream puts it in
// subjects, so it cannot hold wildcards, dots, separators or spaces.
func validName(name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(name) > 255 || strings.ContainsAny(name, ".*>/\\ \t\r\n") {
		return fmt.Errorf("bad name %q", name)
	}
	return nil
}

// ClientNames are the names of c a producer's [client.Client] uses
// (client.WithNames), for deployments that renamed them.
func (c Config) ClientNames() client.Names {
	n := client.Names{ResultsStream: c.Results.Name, BlobsBucket: c.Blobs.Name}
	if len(c.Jobs.Subjects) > 0 {
		n.JobsSubject = c.Jobs.Subjects[0]
	}
	if len(c.Results.Subjects) > 0 {
		n.ResultsSubject = c.Results.Subjects[0]
	}
	return n
}
