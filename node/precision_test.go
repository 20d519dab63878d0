package node

import (
	"log/slog"
	"testing"

	"github.com/jetembed/jetembed/engine"
	"github.com/jetembed/jetembed/engine/ort/enginetest"
	"github.com/jetembed/jetembed/fleet"
)

// TestWorkerConfigNamesPrecision: the cache's keys name the precision the
// engine runs (serve --precision int8, kept after its canary), so that no
// int8 vector stored by one member answers an fp32 member's text of the
// same model, and no fp32 vector an int8 one's. The loop is told it
// whether or not the Embedder is wrapped for the fleet.
func TestWorkerConfigNamesPrecision(t *testing.T) {
	for _, c := range []struct {
		p    engine.Precision
		want string
	}{{engine.PrecisionInt8, "int8"}, {engine.PrecisionFP32, "fp32"}} {
		e := enginetest.Open(t, engine.Config{Precision: c.p})
		r := &Node{cfg: Config{}.WithDefaults(), log: slog.New(slog.DiscardHandler)}
		for _, emb := range []engine.Embedder{e, fleet.Wrap(e, nil)} {
			wc := r.workerConfig(emb, e).Consumer
			if got := wc.Precision; got != c.want {
				t.Errorf("engine in %s: the loop's cache keys name precision %q, want %q", c.want, got, c.want)
			}
			// And the model by every file it reads, not the graph alone.
			if want := e.ModelID() + "+" + e.ModelFingerprint(); wc.CacheModel != want {
				t.Errorf("the loop's cache keys name the model %q, want %q", wc.CacheModel, want)
			}
		}
	}
}
