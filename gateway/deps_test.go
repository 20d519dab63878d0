package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/jetembed/jetembed/internal/testkit"
)

// TestImports holds the gateway to what its doc says: of the project only
// schema and the drain-rate meter (internal/drain, which imports nothing),
// and no NATS client or server (the fleet comes in through
// Requester and Pinger), so it runs, and is tested, without either.
func TestImports(t *testing.T) {
	project := []string{"github.com/jetembed/jetembed/gateway", "github.com/jetembed/jetembed/schema", "github.com/jetembed/jetembed/internal/drain"}
	for _, p := range testkit.Deps(t, ".") {
		if strings.HasPrefix(p, "github.com/jetembed/jetembed/") && !slices.Contains(project, p) {
			t.Errorf("gateway imports %s", p)
		}
		if strings.HasPrefix(p, "github.com/nats-io/") || strings.Contains(p, "onnxruntime") {
			t.Errorf("gateway depends on %s", p)
		}
	}
}
