package client

import (
	"context"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// propagator writes the W3C trace context and baggage of a ctx into the
// headers of a job, as the consumer reads them.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

func injectHeaders(ctx context.Context, h map[string][]string) {
	propagator.Inject(ctx, headerCarrier(h))
}

// headerCarrier keeps keys as written (NATS headers are case-sensitive on
// the wire) and finds them in any case.
type headerCarrier map[string][]string

func (h headerCarrier) Get(key string) string {
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

func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
