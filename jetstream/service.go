package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetembed/jetembed/schema"
)

// The request-reply service: `nats micro ls` lists it as ServiceName, and
// requests go to EndpointSubject.
const (
	ServiceName     = "embed"
	EndpointName    = "embed"
	EndpointSubject = "embed.v1.embed"
	// ServiceQueueGroup spreads requests over the fleet: each goes to one
	// process.
	ServiceQueueGroup = "embed"
)

// ServiceOptions configure [StartService].
type ServiceOptions struct {
	// Version is the build's version; one that is not SemVer (a git
	// describe, "dev") is carried as a 0.0.0 pre-release, since micro
	// requires SemVer.
	Version string
	// Subject is the endpoint subject; empty means [EndpointSubject].
	Subject string
	// QueueGroup is the endpoint's queue group; empty means
	// [ServiceQueueGroup].
	QueueGroup string
	// Metadata is shown by `nats micro info` (e.g. the model id).
	Metadata map[string]string
	// Logger receives refused requests at debug level; nil means
	// slog.Default().
	Logger *slog.Logger
	// Tokenizer, when set, serves the tokenize endpoint
	// ([TokenizeSubject]); without it the endpoint is not registered.
	Tokenizer Tokenizer
	// RerankBytes bounds the text of one rerank request; 0 means
	// [DefaultRerankBytes].
	RerankBytes int
	// NoRerank leaves the rerank endpoint ([RerankSubject]) out.
	NoRerank bool
}

// StartService registers the NATS micro service [ServiceName] on nc with one
// endpoint that hands each request to sink, the same consumer the fetch
// loop feeds, so request texts are packed into the same runs as queued
// jobs. The job is the request body (JSON when its Content-Type says so,
// else msgpack) and the result is the reply, with a micro error (code = the
// job-level error code) when the whole job failed. A request that is bad
// input (undecodable, invalid) is also copied to the DLQ, as a stored job
// would be, so that every refused job can be found in one place.
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
		subject = EndpointSubject
	}
	queue := o.QueueGroup
	if queue == "" {
		queue = ServiceQueueGroup
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        ServiceName,
		Version:     semver(o.Version),
		Description: "BGE-M3 embeddings (dense, sparse, ColBERT); jetembed wire contract v1",
		Metadata:    o.Metadata,
		QueueGroup:  queue,
	})
	if err != nil {
		return nil, fmt.Errorf("micro service: %w", err)
	}
	handler := micro.ContextHandler(ctx, func(ctx context.Context, req micro.Request) {
		if err := sink.Submit(ctx, requestDelivery(nc, req, time.Now())); err != nil {
			log.Debug("request refused", "subject", req.Subject(), "err", err)
		}
	})
	err = svc.AddEndpoint(EndpointName, handler,
		micro.WithEndpointSubject(subject),
		micro.WithEndpointQueueGroup(queue),
		micro.WithEndpointMetadata(map[string]string{"format": "jetembed job v1: msgpack, or JSON with Content-Type: application/json"}),
	)
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("micro endpoint %s: %w", subject, err)
	}
	var limits schema.Limits
	if !o.NoRerank {
		maxBytes := o.RerankBytes
		if maxBytes <= 0 {
			maxBytes = DefaultRerankBytes
		}
		err = svc.AddEndpoint(RerankEndpointName, rerankHandler(ctx, nc, sink, log, limits, maxBytes),
			micro.WithEndpointSubject(RerankSubject),
			micro.WithEndpointQueueGroup(queue),
			micro.WithEndpointMetadata(map[string]string{"format": "jetembed rerank request v1 (query, texts, weights): msgpack, or JSON with Content-Type: application/json"}),
		)
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("micro endpoint %s: %w", RerankSubject, err)
		}
	}
	if o.Tokenizer != nil {
		err = svc.AddEndpoint(TokenizeName, tokenizeHandler(o.Tokenizer, o.Metadata["model"], log, limits),
			micro.WithEndpointSubject(TokenizeSubject),
			micro.WithEndpointQueueGroup(queue),
			micro.WithEndpointMetadata(map[string]string{"format": "jetembed tokenize request v1 (texts, add_special): msgpack, or JSON with Content-Type: application/json"}),
		)
		if err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("micro endpoint %s: %w", TokenizeSubject, err)
		}
	}
	// Once StartService returns, a request must find the endpoint: the
	// subscriptions reach the server with this round trip.
	if err := nc.FlushTimeout(publishTimeout); err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("micro endpoint %s: %w", subject, err)
	}
	return svc, nil
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
