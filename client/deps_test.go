package client

import (
	"strings"
	"testing"

	"github.com/jetembed/jetembed/internal/testkit"
)

// TestDependencies holds the client to nats.go, schema and the
// OpenTelemetry API (propagation, through internal/tracehdr): a producer
// importing it must not pull in the server side, nats-server or an
// OpenTelemetry SDK or exporter.
func TestDependencies(t *testing.T) {
	allowed := []string{
		"github.com/jetembed/jetembed/client",
		"github.com/jetembed/jetembed/schema",
		"github.com/jetembed/jetembed/internal/tracehdr",
		"github.com/nats-io/nats.go",
		"github.com/nats-io/nkeys",
		"github.com/nats-io/nuid",
		"github.com/klauspost/compress",
		"github.com/vmihailenco/",
		"golang.org/x/crypto",
		"golang.org/x/sys",
		"go.opentelemetry.io/otel/propagation",
		"go.opentelemetry.io/otel/trace",
		"go.opentelemetry.io/otel/baggage",
		"go.opentelemetry.io/otel/attribute",
		"go.opentelemetry.io/otel/codes",
		"go.opentelemetry.io/otel/semconv",
		"go.opentelemetry.io/otel/internal",
		"github.com/cespare/xxhash",
	}
	var bad []string
	pkgs := testkit.Deps(t, ".")
	for _, p := range pkgs {
		first, _, _ := strings.Cut(p, "/")
		if !strings.Contains(first, ".") {
			continue // the standard library
		}
		ok := false
		for _, a := range allowed {
			if strings.HasPrefix(p, a) {
				ok = true
				break
			}
		}
		if !ok {
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("client depends on %d packages outside its allow-list:\n%s", len(bad), strings.Join(bad, "\n"))
	}
	if len(pkgs) > 300 {
		t.Errorf("client has %d dependencies, want a lean package (under 300 with the standard library)", len(pkgs))
	}
}
