package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/schema"
)

// The endpoints of the request-reply service ([schema.ServiceName], in
// the queue group of the same name, on [schema.SubjectEmbed]).
const (
	EndpointName = "embed"
	// TenantEndpointName is the endpoint of tenants' requests, on
	// <schema.SubjectEmbed>.<tenant>: the server's permissions let each
	// producer publish only to its own, so the subject tells the service
	// whose request it is (see [schema.Tenancy]).
	TenantEndpointName = "embed-tenant"
)

// ServiceOptions configure [StartService].
type ServiceOptions struct {
	// Version is the build's version; one that is not SemVer (a git
	// describe, "dev") is carried as a 0.0.0 pre-release, since micro
	// requires SemVer.
	Version string
	// Subject is the endpoint subject; empty means [schema.SubjectEmbed].
	Subject string
	// QueueGroup is the endpoint's queue group, which spreads requests
	// over the fleet; empty means [schema.ServiceName].
	QueueGroup string
	// Metadata is shown by `nats micro info` (e.g. the model id).
	Metadata map[string]string
	// Logger receives refused requests at debug level; nil means
	// slog.Default().
	Logger *slog.Logger
	// Tokenizer, when set, serves the tokenize endpoint
	// ([schema.SubjectTokenize]); without it the endpoint is not registered.
	Tokenizer Tokenizer
	// RerankBytes bounds the text of one rerank request; 0 means
	// [DefaultRerankBytes].
	RerankBytes int
	// NoRerank leaves the rerank endpoint ([schema.SubjectRerank]) out.
	NoRerank bool
	// Replies is the reply policy every answer's inbox is checked against
	// before the request is handled (the consumer checks its own again);
	// the zero value is its defaults. [StartWorker] sets the consumer's.
	Replies schema.ReplyPolicy
	// Metrics counts the requests the service settles without the job
	// loop (dropped, shed at the door); nil records nothing.
	// [StartWorker] uses the consumer's metrics when they can.
	Metrics ServiceMetrics
	// TenantQueue, TenantQueueBytes and QueueBytes bound the requests
	// waiting for a worker: per tenant, in requests and bytes, and for
	// every tenant together; 0 means [DefaultTenantQueue],
	// [DefaultTenantQueueBytes], [DefaultQueueBytes].
	TenantQueue      int
	TenantQueueBytes int64
	QueueBytes       int64
}

// tenantOf returns how a request on an endpoint of base (bare, or
// base.<tenant> when tenanted) names its tenant.
func tenantOf(base string, tenanted bool) func(subject string) string {
	return func(subject string) string {
		if !tenanted {
			return ""
		}
		return strings.TrimPrefix(subject, base+".")
	}
}

// StartService registers the NATS micro service [schema.ServiceName] on nc with
// two endpoints, <subject> and <subject>.<tenant> ([EndpointName],
// [TenantEndpointName]), that hand each request to sink, the same consumer
// the fetch loop feeds, so request texts are packed into the same runs as
// queued jobs. A request on <subject>.<tenant> is the tenant's (its
// answer goes only to an inbox in the tenant's space); one on the bare
// subject has none. The job is the request body (JSON when its Content-Type says so,
// else msgpack) and the result is the reply, with a micro error (code = the
// job-level error code) when the whole job failed. A request that is bad
// input (undecodable, invalid) is also copied to the DLQ, as a stored job
// would be, so that every refused job can be found in one place.
//
// Every endpoint (embed, rerank, tokenize, info) answers a request only
// when its reply passes the reply policy for the requester's tenant
// ([ServiceOptions.Replies]); any other is handed to sink as bad_reply (a
// dead letter, a log line, a metric) and gets no answer at all. Requests
// leave their subscription at once into a bounded queue per tenant,
// served round-robin by tenant (see service_inbound.go).
//
// Each request's Submit runs under a context derived from ctx, so ending
// ctx ends the requests still waiting for room. StartService returns once
// the server knows the endpoint; Stop the returned service to unregister.
func StartService(ctx context.Context, nc *nats.Conn, sink Sink, o ServiceOptions) (micro.Service, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	subject := o.Subject
	if subject == "" {
		subject = schema.SubjectEmbed
	}
	queue := o.QueueGroup
	if queue == "" {
		queue = schema.ServiceName
	}
	metrics := o.Metrics
	if metrics == nil {
		metrics = nopServiceMetrics{}
	}
	perTenant, perTenantBytes, maxBytes := o.TenantQueue, o.TenantQueueBytes, o.QueueBytes
	if perTenant <= 0 {
		perTenant = DefaultTenantQueue
	}
	if perTenantBytes <= 0 {
		perTenantBytes = DefaultTenantQueueBytes
	}
	if maxBytes <= 0 {
		maxBytes = DefaultQueueBytes
	}
	s := &service{nc: nc, sink: sink, log: log, replies: o.Replies.WithDefaults(), metrics: metrics, ctx: ctx,
		in: newInbound(perTenant, perTenantBytes, maxBytes), subjects: map[string]bool{}}
	// The tracker notes reconnects from now on (see requestDelivery).
	deniedTracker(nc)
	slowCtx, stopSlow := context.WithCancel(context.WithoutCancel(ctx))
	s.stopSlow = stopSlow
	s.slow = watchSlow(nc, s.owns, metrics, log)
	svc, err := micro.AddService(nc, micro.Config{
		Name:        schema.ServiceName,
		Version:     semver(o.Version),
		Description: "BGE-M3 embeddings (dense, sparse, ColBERT); jetembed wire contract v1",
		Metadata:    o.Metadata,
		QueueGroup:  queue,
	})
	if err != nil {
		stopSlow()
		return nil, fmt.Errorf("micro service: %w", err)
	}
	s.Service = svc
	var limits schema.Limits
	embedFormat := "jetembed job v1: msgpack, or JSON with Content-Type: application/json"
	eps := []*endpoint{
		{name: EndpointName, subject: subject, format: embedFormat, handle: s.embed, errBody: resultErrBody},
		{name: TenantEndpointName, subject: subject, tenanted: true, format: embedFormat, handle: s.embed, errBody: resultErrBody},
	}
	// The rerank, tokenize and info endpoints, each bare and per tenant as
	// the embed endpoint is.
	type extra struct {
		name, subject, format string
		handle                func(context.Context, queued)
		errBody               func(schema.Encoding, *schema.Error) []byte
		everyMember           bool
	}
	var extras []extra
	if !o.NoRerank {
		maxBytes := o.RerankBytes
		if maxBytes <= 0 {
			maxBytes = DefaultRerankBytes
		}
		extras = append(extras, extra{RerankEndpointName, schema.SubjectRerank, "jetembed rerank request v1 (query, texts, weights)",
			func(ctx context.Context, it queued) { s.rerank(ctx, it, limits, maxBytes) }, rerankErrBody, false})
	}
	if o.Tokenizer != nil {
		extras = append(extras, extra{TokenizeName, schema.SubjectTokenize, "jetembed tokenize request v1 (texts, add_special)",
			func(_ context.Context, it queued) { s.tokenize(it, o.Tokenizer, o.Metadata[schema.MetaModel], limits) }, tokenizeErrBody, false})
	}
	extras = append(extras, extra{InfoName, schema.SubjectInfo, "empty: every member answers with its micro service info (JSON)",
		func(_ context.Context, it queued) { s.info(it) }, nil, true})
	for _, x := range extras {
		for _, tenanted := range []bool{false, true} {
			name := x.name
			if tenanted {
				name += "-tenant"
			}
			eps = append(eps, &endpoint{name: name, subject: x.subject, tenanted: tenanted, format: x.format,
				handle: x.handle, errBody: x.errBody, everyMember: x.everyMember})
		}
	}
	for _, ep := range eps {
		subj := ep.subject
		if ep.tenanted {
			subj += ".*"
		}
		s.subjects[subj] = true
		opts := []micro.EndpointOpt{
			micro.WithEndpointSubject(subj),
			micro.WithEndpointMetadata(map[string]string{"format": ep.format}),
			micro.WithEndpointPendingLimits(DefaultServicePendingMsgs, DefaultServicePendingBytes),
		}
		if ep.everyMember {
			opts = append(opts, micro.WithEndpointQueueGroupDisabled())
		} else {
			opts = append(opts, micro.WithEndpointQueueGroup(queue))
		}
		if err = svc.AddEndpoint(ep.name, s.door(ep), opts...); err != nil {
			_ = svc.Stop()
			stopSlow()
			return nil, fmt.Errorf("micro endpoint %s: %w", subj, err)
		}
	}
	go s.slow.run(slowCtx)
	for range serviceWorkers() {
		s.workers.Go(s.work)
	}
	stop := context.AfterFunc(ctx, s.shutdown)
	s.stopAfter = stop
	// Once StartService returns, a request must find the endpoint: the
	// subscriptions reach the server with this round trip.
	if err := nc.FlushTimeout(publishTimeout); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("micro endpoint %s: %w", subject, err)
	}
	return s, nil
}

// semverRE is the SemVer 2.0 grammar, as micro checks it.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// semver returns v if it is SemVer (a leading "v" dropped), else v as the
// pre-release of 0.0.0, else 0.0.0-dev.
func semver(v string) string {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if semverRE.MatchString(v) {
		return v
	}
	pre := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '.' {
			return r
		}
		return '-'
	}, v)
	if s := "0.0.0-" + pre; pre != "" && semverRE.MatchString(s) {
		return s
	}
	return "0.0.0-dev"
}
