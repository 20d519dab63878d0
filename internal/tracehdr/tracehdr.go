// Package tracehdr carries W3C trace context in NATS message headers for
// both sides: package telemetry (the server) and package client (producers),
// which must not share more than this. It imports only the OpenTelemetry
// propagation API.
package tracehdr

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// Propagator writes and reads the trace context and baggage.
var Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Inject writes the trace context of ctx into h; a nil h is left alone.
func Inject(ctx context.Context, h map[string][]string) {
	if h == nil {
		return
	}
	Propagator.Inject(ctx, Carrier(h))
}

// Extract returns ctx carrying the remote span context found in h.
func Extract(ctx context.Context, h map[string][]string) context.Context {
	if len(h) == 0 {
		return ctx
	}
	return Propagator.Extract(ctx, Carrier(h))
}

// Carrier adapts NATS headers to the OpenTelemetry carrier. NATS header
// keys are case-sensitive, but a header that went through an HTTP gateway
// may arrive canonicalized ("Traceparent"), so Get falls back to a
// case-insensitive match.
type Carrier map[string][]string

// Get returns the first value of key, in any case.
func (h Carrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if len(v) > 0 && strings.EqualFold(k, key) {
			return v[0]
		}
	}
	return ""
}

// Set sets key to value, as written.
func (h Carrier) Set(key, value string) { h[key] = []string{value} }

// Keys lists the keys.
func (h Carrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
