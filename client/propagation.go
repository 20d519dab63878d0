package client

import (
	"context"

	"github.com/jetembed/jetembed/internal/tracehdr"
)

// injectHeaders writes the W3C trace context and baggage of ctx into the
// headers of a job, as the consumer reads them.
func injectHeaders(ctx context.Context, h map[string][]string) { tracehdr.Inject(ctx, h) }
