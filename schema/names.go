package schema

// The wire names of the default deployment: what producers, the fleet, the
// gateway and `jetembed provision` agree on. Every package takes them from
// here (internal/importrules' TestWireNamesInSchema holds it to that);
// a deployment renames the streams and buckets with provision's flags.
const (
	// SubjectJobs is what the jobs stream captures: a producer publishes a
	// job on embed.jobs.<tenant>.<anything>.
	SubjectJobs = "embed.jobs.>"
	// SubjectResults is what the results stream captures: results of
	// queued jobs go to embed.results.<tenant>.<...>.
	SubjectResults = "embed.results.>"
	// SubjectDeliver is where a tenant's results consumers deliver:
	// embed.deliver.<tenant>.<id>, a space of the tenant's own that the
	// fleet's account exports to it (a push consumer of the results stream
	// lives in the fleet's account and delivers there; the tenant's inbox
	// _INBOX_<tenant> is in its own account and cannot be exported by
	// tenant token). Nothing is published there but deliveries.
	SubjectDeliver = "embed.deliver"
	// SubjectDLQ is what the dead-letter stream captures.
	SubjectDLQ = "embed.dlq.>"
	// SubjectUsage is what the usage stream captures: one usage event per
	// settled job on embed.usage.<tenant> ([UsageSubject]).
	SubjectUsage = "embed.usage.>"
	// SubjectService covers the request-reply endpoints below.
	SubjectService = "embed.v1.>"
	// SubjectEmbed is the embed endpoint (embed.v1.embed.<tenant> for a
	// tenant's requests).
	SubjectEmbed = "embed.v1.embed"
	// SubjectRerank is the rerank endpoint.
	SubjectRerank = "embed.v1.rerank"
	// SubjectTokenize is the tokenize endpoint.
	SubjectTokenize = "embed.v1.tokenize"
	// SubjectInfo is the info endpoint (embed.v1.info.<tenant> for a
	// tenant): every member answers it with its micro service info, only
	// to a reply its reply policy allows (what $SRV.INFO.embed says, to
	// any reply, so $SRV is for operators only).
	SubjectInfo = "embed.v1.info"

	// StreamJobs, StreamResults and StreamDLQ are the streams' names.
	StreamJobs    = "EMBED_JOBS"
	StreamResults = "EMBED_RESULTS"
	StreamDLQ     = "EMBED_DLQ"
	// StreamUsage is the usage stream: what every settled job cost, per
	// tenant (`jetembed usage` reads it).
	StreamUsage = "EMBED_USAGE"
	// ConsumerName is the durable pull consumer of the jobs stream the
	// whole fleet shares.
	ConsumerName = "embedder"
	// BucketEngines is the KV bucket of the fleet's shapes, locks, wants,
	// probes and members.
	BucketEngines = "EMBED_ENGINES"
	// BucketBlobs is the Object Store bucket of results too large for one
	// message.
	BucketBlobs = "EMBED_BLOBS"
	// BucketCache is the KV bucket of the fleet's cache of per-text
	// results (serve --cache kv).
	BucketCache = "EMBED_CACHE"

	// ServiceName is the NATS micro service (`nats micro ls`) and its
	// queue group.
	ServiceName = "embed"
	// MetaInteractiveTokens is the service metadata key under which a
	// member publishes its interactive capacity (serve's
	// --interactive-tokens): a gateway sizes the parts of its calls and
	// its window by it.
	MetaInteractiveTokens = "interactive_tokens"
	// MetaMaxTokens is the service metadata key of a member's longest text
	// in tokens (the model's maximum, or serve's --max-tokens).
	MetaMaxTokens = "max_tokens"
	// MetaModel is the service metadata key of the model a member serves.
	MetaModel = "model"
)
